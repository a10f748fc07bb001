package guided

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
)

// jval is a parsed JSON value that keeps object keys in document order:
// a schema's property order is the order objects are generated in.
type jval struct {
	kind jkind
	b    bool
	s    string // string value, or a number's source text
	arr  []*jval
	keys []string
	vals []*jval
}

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNum
	jStr
	jArr
	jObj
)

// maxJSONNesting bounds the schema document's own nesting, so hostile
// input cannot recurse deeply.
const maxJSONNesting = 128

func parseJSON(data []byte) (*jval, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := parseJSONValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the JSON value")
	}
	return v, nil
}

func parseJSONValue(dec *json.Decoder, depth int) (*jval, error) {
	if depth > maxJSONNesting {
		return nil, fmt.Errorf("JSON nests deeper than %d", maxJSONNesting)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &jval{kind: jNull}, nil
	case bool:
		return &jval{kind: jBool, b: t}, nil
	case json.Number:
		return &jval{kind: jNum, s: t.String()}, nil
	case string:
		return &jval{kind: jStr, s: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := &jval{kind: jArr}
			for dec.More() {
				e, err := parseJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.arr = append(v.arr, e)
			}
			_, err := dec.Token() // ']'
			return v, err
		case '{':
			v := &jval{kind: jObj}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				e, err := parseJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.keys = append(v.keys, k)
				v.vals = append(v.vals, e)
			}
			_, err := dec.Token() // '}'
			return v, err
		}
	}
	return nil, fmt.Errorf("unexpected JSON token %v", tok)
}

// get returns the first member named key of an object, or nil.
func (v *jval) get(key string) *jval {
	if v == nil || v.kind != jObj {
		return nil
	}
	for i, k := range v.keys {
		if k == key {
			return v.vals[i]
		}
	}
	return nil
}

// appendJSON writes v compactly, strings escaped the way generated strings
// are (see jsonEscape), so an enum or const literal is one fixed string.
func (v *jval) appendJSON(buf []byte) []byte {
	switch v.kind {
	case jNull:
		return append(buf, "null"...)
	case jBool:
		if v.b {
			return append(buf, "true"...)
		}
		return append(buf, "false"...)
	case jNum:
		return append(buf, canonNumber(v.s)...)
	case jStr:
		return appendJSONString(buf, v.s)
	case jArr:
		buf = append(buf, '[')
		for i, e := range v.arr {
			if i > 0 {
				buf = append(buf, ',')
			}
			buf = e.appendJSON(buf)
		}
		return append(buf, ']')
	}
	buf = append(buf, '{')
	for i, k := range v.keys {
		if i > 0 {
			buf = append(buf, ',')
		}
		buf = appendJSONString(buf, k)
		buf = append(buf, ':')
		buf = v.vals[i].appendJSON(buf)
	}
	return append(buf, '}')
}

func appendJSONString(buf []byte, s string) []byte {
	buf = append(buf, '"')
	for _, r := range s { // the decoder already made s valid UTF-8
		if needsEscape(r) {
			buf = append(buf, jsonEscape(r)...)
		} else {
			buf = append(buf, string(r)...)
		}
	}
	return append(buf, '"')
}

// canonNumber writes a JSON number in the canonical form generated numbers
// have (plain decimal, no exponent, no trailing fraction zeros, no -0), so
// a constant equals a generated number exactly when their texts are
// equal. Numbers whose plain form is long keep their source text.
func canonNumber(src string) string {
	r, ok := new(big.Rat).SetString(src)
	if !ok {
		return src
	}
	ip, fp, ok := decimalString(new(big.Rat).Abs(r))
	if !ok || len(ip)+len(fp) > 40 {
		return src
	}
	out := ip
	if fp != "" {
		out += "." + fp
	}
	if r.Sign() < 0 {
		out = "-" + out
	}
	return out
}
