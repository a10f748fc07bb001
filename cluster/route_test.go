package cluster

import (
	"fmt"
	"testing"
)

func TestRoute(t *testing.T) {
	e := func(id string, load, capacity int) NodeInfo {
		return NodeInfo{Role: RoleEngine, ID: id, Load: load, Capacity: capacity}
	}
	// winner is the rendezvous choice among a, b, c for key "k".
	winner, _ := Route("k", []NodeInfo{e("a", 0, 4), e("b", 0, 4), e("c", 0, 4)})
	others := map[string][2]string{"a": {"b", "c"}, "b": {"a", "c"}, "c": {"a", "b"}}[winner]
	for _, tc := range []struct {
		name    string
		engines []NodeInfo
		want    string
		routed  bool
	}{
		{"none", nil, "", false},
		{"one", []NodeInfo{e("a", 0, 4)}, "a", true},
		{"one saturated", []NodeInfo{e("a", 4, 4)}, "", false},
		{"winner free", []NodeInfo{e("a", 3, 4), e("b", 3, 4), e("c", 3, 4)}, winner, true},
		{"winner saturated: least loaded", []NodeInfo{e(winner, 4, 4), e(others[0], 3, 4), e(others[1], 1, 4)}, others[1], true},
		{"load relative to capacity", []NodeInfo{e(winner, 4, 4), e(others[0], 3, 8), e(others[1], 2, 4)}, others[0], true},
		{"tie: smaller id", []NodeInfo{e(winner, 9, 9), e(others[0], 1, 4), e(others[1], 1, 4)}, min(others[0], others[1]), true},
		{"all saturated", []NodeInfo{e("a", 4, 4), e("b", 5, 4), e("c", 4, 4)}, "", false},
		{"zero capacity never saturates", []NodeInfo{e("a", 100, 0)}, "a", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have, routed := Route("k", tc.engines)
			if have != tc.want || routed != tc.routed {
				t.Fatalf("have %q, %v; want %q, %v", have, routed, tc.want, tc.routed)
			}
		})
	}
}

// TestRouteAffinity checks the rendezvous properties routing relies on:
// the order of the list does not matter, an engine leaving moves only its
// own sessions, and sessions spread evenly.
func TestRouteAffinity(t *testing.T) {
	three := []NodeInfo{{ID: "e1"}, {ID: "e2"}, {ID: "e3"}}
	reversed := []NodeInfo{three[2], three[1], three[0]}
	two := three[:2]
	counts := map[string]int{}
	const n = 3000
	for i := range n {
		key := fmt.Sprintf("acme/s%d", i)
		a, _ := Route(key, three)
		if b, _ := Route(key, reversed); b != a {
			t.Fatalf("%s: have %s reversed; want %s", key, b, a)
		}
		counts[a]++
		if a == "e3" {
			continue
		}
		if b, _ := Route(key, two); b != a {
			t.Fatalf("%s: have %s after e3 left; want %s still", key, b, a)
		}
	}
	for id, c := range counts {
		if c < n/3*8/10 || c > n/3*12/10 {
			t.Errorf("%s: have %d of %d sessions; want about a third", id, c, n)
		}
	}
}
