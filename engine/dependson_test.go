package engine

import (
	"strconv"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// graph parses "a->b a->c b->a" (names in namespace ns) into a deps func
// that counts its calls.
func graph(t *testing.T, edges string) (func(SyncRef) []SyncRef, map[SyncRef]int) {
	t.Helper()
	g := map[SyncRef][]SyncRef{}
	for _, e := range strings.Fields(edges) {
		from, to, ok := strings.Cut(e, "->")
		if !ok {
			t.Fatalf("edge %q", e)
		}
		g[ref(from)] = append(g[ref(from)], ref(to))
	}
	calls := map[SyncRef]int{}
	return func(r SyncRef) []SyncRef {
		calls[r]++
		return g[r]
	}, calls
}

// ref reads "name" (namespace ns) or "namespace/name".
func ref(s string) SyncRef {
	if ns, name, ok := strings.Cut(s, "/"); ok {
		return SyncRef{Namespace: ns, Name: name}
	}
	return SyncRef{Namespace: "ns", Name: s}
}

func TestDependencyCycle(t *testing.T) {
	for _, tc := range []struct {
		name, edges, start string
		want               string // the cycle, "" for none
	}{
		{"none", "a->b b->c", "a", ""},
		{"missing dependency", "a->gone", "a", ""},
		{"self", "a->a", "a", "ns/a -> ns/a"},
		{"two", "a->b b->a", "a", "ns/a -> ns/b -> ns/a"},
		{"two from the other end", "a->b b->a", "b", "ns/b -> ns/a -> ns/b"},
		{"three", "a->b b->c c->a", "b", "ns/b -> ns/c -> ns/a -> ns/b"},
		{"across namespaces", "a->x/b x/b->a", "a", "ns/a -> x/b -> ns/a"},
		// start waits on a cycle it is not part of: that is not its cycle.
		{"depends on a cycle", "a->b b->c c->b", "a", ""},
		{"shortest of two", "a->b b->c c->d d->a b->a", "a", "ns/a -> ns/b -> ns/a"},
		{"shortest, found late", "a->b a->c b->d d->e e->a c->a", "a", "ns/a -> ns/c -> ns/a"},
		{"diamond and a cycle", "a->b a->c b->d c->d d->a", "a", "ns/a -> ns/b -> ns/d -> ns/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps, calls := graph(t, tc.edges)
			got := CycleString(DependencyCycle(ref(tc.start), deps))
			if got != tc.want {
				t.Errorf("cycle %q, want %q", got, tc.want)
			}
			for r, n := range calls {
				if n > 1 {
					t.Errorf("deps(%s) called %d times", r, n)
				}
			}
		})
	}
}

// A large acyclic graph is searched once per node: a chain of 10,000
// where each also depends on the next 3.
func TestDependencyCycleLarge(t *testing.T) {
	const n = 10000
	name := func(i int) SyncRef { return SyncRef{Namespace: "ns", Name: strconv.Itoa(i)} }
	calls := 0
	deps := func(r SyncRef) []SyncRef {
		calls++
		i, err := strconv.Atoi(r.Name)
		if err != nil {
			t.Fatal(err)
		}
		var out []SyncRef
		for j := i + 1; j <= i+3 && j < n; j++ {
			out = append(out, name(j))
		}
		return out
	}
	if c := DependencyCycle(name(0), deps); c != nil {
		t.Fatalf("cycle %s in an acyclic graph", CycleString(c))
	}
	if calls != n {
		t.Errorf("deps called %d times, want %d (once per node)", calls, n)
	}
}

func TestDependsOnDefaultsTheNamespace(t *testing.T) {
	got := DependsOn("home", []v1alpha1.DependencyReference{{Name: "a"}, {Name: "b", Namespace: "other"}})
	want := []SyncRef{{"home", "a"}, {"other", "b"}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("DependsOn = %v, want %v", got, want)
	}
	if s := (SyncRef{Name: "a"}).String(); s != "a" {
		t.Errorf("String without a namespace = %q", s)
	}
}
