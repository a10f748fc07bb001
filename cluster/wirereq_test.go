package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/specgate/specgate/engine"
	"github.com/specgate/specgate/internal/testredis"
)

// fill sets every exported field under v to a distinct non-zero value
// (valid where the wire checks: priorities, raw JSON).
func fill(v reflect.Value, n *int) {
	*n++
	switch {
	case v.Type() == reflect.TypeOf(time.Time{}):
		v.Set(reflect.ValueOf(time.Unix(0, int64(1_700_000_000_000_000_000+*n))))
		return
	case v.Type() == reflect.TypeOf(engine.Priority(0)):
		v.Set(reflect.ValueOf(engine.Interactive))
		return
	case v.Type() == reflect.TypeOf(json.RawMessage(nil)):
		v.SetBytes([]byte(fmt.Sprintf(`{"n":%d}`, *n)))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), n)
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), n)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), n)
		}
		v.Set(s)
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1<<63 + uint64(*n)) // past float64's exact integers
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(*n) + 0.25)
	default:
		panic(fmt.Sprintf("fill: no value for %s", v.Type()))
	}
}

// TestRequestWire: every field of engine.Request, nested ones included,
// crosses the wire unchanged. A field added to the engine's request that
// the wire does not carry fails here, not in a split deployment.
func TestRequestWire(t *testing.T) {
	var in engine.Request
	n := 0
	fill(reflect.ValueOf(&in).Elem(), &n)
	_, body, err := encodeRequest(in, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, logged := range []bool{false, true} {
		version, body, err := encodeRequest(in, logged)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]string{false: "1", true: "2"}[logged]; version != want {
			t.Fatalf("logged %v: have version %q; want %q", logged, version, want)
		}
		out, err := decodeRequest(version, string(body))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(out, in) {
			t.Fatalf("the request changed on the wire:\nhave %+v\nwant %+v", out, in)
		}
	}

	// Version 0, what earlier gateways queued, still reads.
	legacy, _ := json.Marshal(in)
	out, err := decodeRequest("", string(legacy))
	if err == nil && out.Deadline.Equal(in.Deadline) {
		out.Deadline = in.Deadline // JSON keeps the instant, not the location
	}
	if err != nil || !reflect.DeepEqual(out, in) {
		t.Fatalf("version 0: have %+v, %v", out, err)
	}
	for _, tc := range []struct{ name, version, body string }{
		{"newer version", "3", string(body)},
		{"not JSON", "1", "{"},
		{"unknown priority", "1", `{"id":"r","priority":"urgent"}`},
		{"bad seed", "1", `{"id":"r","sample":{"seed":"-1"}}`},
	} {
		if r, err := decodeRequest(tc.version, tc.body); err == nil {
			t.Errorf("%s: have %+v; want an error", tc.name, r)
		}
	}
}

// TestNewerWireVersionRefused: a request queued in a wire version this
// engine cannot read is refused (bad_request, with the reason), so the
// gateway answers at once rather than after PlaceTimeout.
func TestNewerWireVersionRefused(t *testing.T) {
	rdb := testredis.Client(t)
	prefix := testredis.Prefix(t)
	startEngine(t, fastEngine(rdb, prefix, "e1", newFakeEngine(0)))
	c := fastClient(t, rdb, prefix)
	waitEngines(t, c, 1)
	k := newKeys(prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	const rk = "r9#abc"
	err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: k.queue("e1"), Values: []any{fieldKey, rk, fieldGateway, "g", fieldVersion, "99", fieldRequest, `{"id":"r9"}`}}).Err()
	if err != nil {
		t.Fatal(err)
	}
	for {
		msgs, err := rdb.XRange(ctx, k.out(rk), "-", "+").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) > 0 {
			e, err := decodeOut(msgs[0])
			var ee *engine.Error
			if err != nil || e.Kind != kindRefused || !errors.As(e.Refuse, &ee) || ee.Code != engine.CodeBadRequest {
				t.Fatalf("have %+v, %v; want a bad_request refusal", e, err)
			}
			return
		}
		select {
		case <-ctx.Done():
			t.Fatal("no refusal was written")
		case <-time.After(20 * time.Millisecond):
		}
	}
}
