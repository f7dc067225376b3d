package shard

import (
	"fmt"
	"testing"
)

// keys are n ManifestSync keys as a cluster names them: a few namespaces,
// names with counters.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = fmt.Sprintf("team-%d/app-%d", i%7, i)
	}
	return ks
}

func members(n int) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("manifestsync-operator-%d", i)
	}
	return ms
}

func loads(a map[string]string) map[string]int {
	l := map[string]int{}
	for _, m := range a {
		l[m]++
	}
	return l
}

func balance(t *testing.T, a map[string]string, n int) float64 {
	t.Helper()
	l := loads(a)
	if len(l) != n {
		t.Fatalf("%d members hold keys, want %d: %v", len(l), n, l)
	}
	lo, hi := -1, 0
	for _, c := range l {
		if lo < 0 || c < lo {
			lo = c
		}
		hi = max(hi, c)
	}
	return float64(hi) / float64(lo)
}

func moved(a, b map[string]string) (n int, keys []string) {
	for k, m := range a {
		if b[k] != m {
			n++
			keys = append(keys, k)
		}
	}
	return n, keys
}

func TestRingBalance(t *testing.T) {
	ks := keys(1000)
	for _, n := range []int{1, 2, 4, 5, 8} {
		a := Assign(ks, members(n), nil)
		if len(a) != len(ks) {
			t.Fatalf("%d members: %d keys assigned, want %d", n, len(a), len(ks))
		}
		if r := balance(t, a, n); r > 1.15 {
			t.Errorf("%d members: max/min = %.3f, want ≤ 1.15 (%v)", n, r, loads(a))
		}
	}
}

// TestRingPlainHashing checks that without bounds the ring alone spreads
// keys as consistent hashing does: each member's share near 1/N.
func TestRingPlainHashing(t *testing.T) {
	r := NewRing(members(4))
	l := map[string]int{}
	for _, k := range keys(10000) {
		l[r.Owner(k)]++
	}
	for m, c := range l {
		if c < 2000 || c > 3000 {
			t.Errorf("%s: %d of 10000 keys, want about 2500", m, c)
		}
	}
	if NewRing(nil).Owner("a/b") != "" {
		t.Error("an empty ring names an owner")
	}
}

func TestRingJoinMovesAboutOneNth(t *testing.T) {
	ks := keys(1000)
	// Grow as the sharder does: each step starts from the last.
	var a map[string]string
	for _, n := range []int{1, 2, 4} {
		a = Assign(ks, members(n), a)
	}
	b := Assign(ks, members(5), a)
	n, which := moved(a, b)
	ideal := len(ks) / 5
	if float64(n) > 1.3*float64(ideal) {
		t.Errorf("a fifth member moved %d keys, want ≤ 1.3 x %d", n, ideal)
	}
	for _, k := range which {
		if b[k] != members(5)[4] {
			t.Errorf("key %s moved from %s to %s, not to the joining member", k, a[k], b[k])
		}
	}
	if r := balance(t, b, 5); r > 1.15 {
		t.Errorf("5 members: max/min = %.3f (%v)", r, loads(b))
	}
	t.Logf("join moved %d keys (ideal %d)", n, ideal)
}

func TestRingLeaveMovesOnlyTheLeaversKeys(t *testing.T) {
	ks := keys(1000)
	var a map[string]string
	for _, n := range []int{1, 2, 4, 5} {
		a = Assign(ks, members(n), a)
	}
	for _, gone := range members(5) {
		var rest []string
		for _, m := range members(5) {
			if m != gone {
				rest = append(rest, m)
			}
		}
		b := Assign(ks, rest, a)
		_, which := moved(a, b)
		for _, k := range which {
			if a[k] != gone {
				t.Errorf("%s left: key %s moved from %s, which stayed", gone, k, a[k])
			}
		}
		if r := balance(t, b, 4); r > 1.15 {
			t.Errorf("%s left: max/min = %.3f (%v)", gone, r, loads(b))
		}
	}
}

func TestRingDeterministic(t *testing.T) {
	ks := keys(500)
	a := Assign(ks, members(3), nil)
	rev := make([]string, len(ks))
	for i, k := range ks {
		rev[len(ks)-1-i] = k
	}
	ms := members(3)
	b := Assign(rev, []string{ms[2], ms[0], ms[1], ms[0]}, nil)
	if n, _ := moved(a, b); n != 0 {
		t.Errorf("the same keys and members listed in another order: %d keys differ", n)
	}
	// Stable: assigning again from the result moves nothing.
	if n, _ := moved(a, Assign(ks, ms, a)); n != 0 {
		t.Errorf("re-assigning moved %d keys", n)
	}
	if len(Assign(ks, nil, nil)) != 0 {
		t.Error("keys assigned without members")
	}
}
