package keyspace

import "testing"

// The vectors are the Redis Cluster specification's: CRC16 of "123456789"
// is 0x31C3, and keys with equal tags share a slot.
func TestSlot(t *testing.T) {
	if have := crc16("123456789"); have != 0x31C3 {
		t.Fatalf("crc16: have %#x; want 0x31c3", have)
	}
	for _, tc := range []struct {
		key  string
		want int
	}{
		{"foo", 12182},
		{"bar", 5061},
		{"{user1000}.following", Slot("user1000")},
		{"foo{}{bar}", Slot("foo{}{bar}")}, // empty first tag: the whole key
		{"foo{{bar}}zap", Slot("{bar")},
		{"foo{bar}{zap}", Slot("bar")},
	} {
		if have := Slot(tc.key); have != tc.want {
			t.Errorf("Slot(%q): have %d; want %d", tc.key, have, tc.want)
		}
	}
}

// Every group of keys that one script, transaction or multi-key command
// touches must share a slot, whatever the ids hold.
func TestGroupsShareASlot(t *testing.T) {
	ids := []string{"s_0123abcd", "", "a}b", "{x}", "%7B", "}", "tenant:user", "ünï"}
	for _, p := range []string{"", "test:x:1a2b:"} {
		s := New(p)
		for _, id := range ids {
			for _, rid := range ids {
				groups := map[string][]string{
					"session": {s.Session(id), s.Messages(id), s.Request(id, rid), s.RequestLog(id, rid),
						s.LoggedClusterRequest(s.RequestLog(id, rid), rid+"#"+id), s.ClusterOutputOf(s.LoggedClusterRequest(s.RequestLog(id, rid), rid+"#"+id)),
						s.LogOwner(s.RequestLog(id, rid))},
					"tenants": {s.Tenant(id), s.TenantIDs(), s.Kid(rid)},
					"limits":  {s.Lease(id, "conns"), s.Lease(id, "reqs"), s.TokensPrefix(id) + "29000000"},
					"nodes":   {s.Nodes(), s.Node("engine/" + id)},
					"request": {s.ClusterRequest(id + "#" + rid), s.ClusterOutput(id + "#" + rid)},
				}
				for name, keys := range groups {
					for _, k := range keys[1:] {
						if Slot(k) != Slot(keys[0]) {
							t.Errorf("%s group (ids %q, %q): %q on slot %d, %q on %d", name, id, rid, keys[0], Slot(keys[0]), k, Slot(k))
						}
					}
				}
			}
		}
	}
}

// Distinct ids must give distinct keys, and the escape must round-trip for
// the queue owner.
func TestTagIsOneToOne(t *testing.T) {
	ids := []string{"a{b", "a%7Bb", "a%b", "a%25b", "a}b", "a%7Db", "ab"}
	seen := map[string]string{}
	s := New("p:")
	for _, id := range ids {
		k := s.Queue(id)
		if prev, ok := seen[k]; ok {
			t.Fatalf("ids %q and %q give one key %q", prev, id, k)
		}
		seen[k] = id
		owner, ok := s.QueueOwner(k)
		if !ok || owner != id {
			t.Errorf("QueueOwner(%q): have %q, %v; want %q", k, owner, ok, id)
		}
	}
	if _, ok := s.QueueOwner(s.SharedQueue()); ok {
		t.Errorf("the shared stream reads as an engine's")
	}
}

// Sessions, engines and requests spread over slots: many ids must not pile
// onto a few slots.
func TestSpread(t *testing.T) {
	s := New("")
	slots := map[int]bool{}
	for i := range 1000 {
		slots[Slot(s.Session("s_"+string(rune('a'+i%26))+string(rune('a'+i/26))))] = true
	}
	if len(slots) < 900 {
		t.Fatalf("1000 sessions on %d slots; want them spread", len(slots))
	}
}
