package engine

import (
	"strings"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// SyncRef names a ManifestSync. The operator and engine vet both find
// the cycles of spec.dependsOn with it: the operator over the
// ManifestSyncs of its cache, vet over those of the files it is given.
type SyncRef struct{ Namespace, Name string }

// String is "namespace/name", or "name" without a namespace (a file that
// names none).
func (r SyncRef) String() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// DependsOn are the ManifestSyncs refs name, for a ManifestSync of
// namespace: a reference without a namespace is to one of its own
// namespace.
func DependsOn(namespace string, refs []v1alpha1.DependencyReference) []SyncRef {
	out := make([]SyncRef, len(refs))
	for i, d := range refs {
		out[i] = SyncRef{Namespace: d.Namespace, Name: d.Name}
		if out[i].Namespace == "" {
			out[i].Namespace = namespace
		}
	}
	return out
}

// DependencyCycle returns the shortest cycle of dependencies through
// start, from start back to start ([a, b, a] for a -> b -> a; [a, a] for a
// ManifestSync that depends on itself), or nil when start is on no
// cycle. deps gives the dependencies of a ManifestSync (none for one that
// does not exist); it is called once per ManifestSync reachable from
// start, at most.
func DependencyCycle(start SyncRef, deps func(SyncRef) []SyncRef) []SyncRef {
	// Breadth first from start: the first edge back to start closes the
	// shortest cycle.
	parent := map[SyncRef]SyncRef{}
	queue := []SyncRef{start}
	seen := map[SyncRef]bool{start: true}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, next := range deps(cur) {
			if next == start {
				return cyclePath(start, cur, parent)
			}
			if !seen[next] {
				seen[next] = true
				parent[next] = cur
				queue = append(queue, next)
			}
		}
	}
	return nil
}

// cyclePath is the cycle start -> ... -> last -> start, by the parents
// the search recorded.
func cyclePath(start, last SyncRef, parent map[SyncRef]SyncRef) []SyncRef {
	path := []SyncRef{start}
	for cur := last; cur != start; cur = parent[cur] {
		path = append(path, cur)
	}
	// path is start, last, ..., the first step: reverse all but start.
	for i, j := 1, len(path)-1; i < j; i, j = i+1, j-1 {
		path[i], path[j] = path[j], path[i]
	}
	return append(path, start)
}

// CycleString names a cycle for people: "a/x -> b/y -> a/x".
func CycleString(cycle []SyncRef) string {
	names := make([]string, len(cycle))
	for i, r := range cycle {
		names[i] = r.String()
	}
	return strings.Join(names, " -> ")
}
