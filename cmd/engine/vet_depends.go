package main

import (
	"fmt"
	"strings"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// ruleCycle is the rule of a cycle of spec.dependsOn among the
// ManifestSyncs vet reads: the operator would never sync any of them.
const ruleCycle = "dependsOn/cycle"

// dependency is one entry of a ManifestSync's spec.dependsOn, with where
// it is.
type dependency struct {
	ref   engine.SyncRef
	field string // spec.dependsOn[i]
	pos   position
}

// dependencies reads spec.dependsOn of a document as it is, so that a
// ManifestSync with other findings still takes part in the search for
// cycles; entries without a name are left to the CRD's checks.
func (s *syncReport) dependencies(d *syncDoc) []dependency {
	spec, _ := d.obj["spec"].(map[string]any)
	list, _ := spec["dependsOn"].([]any)
	var out []dependency
	for i, item := range list {
		m, _ := item.(map[string]any)
		name, _ := m["name"].(string)
		namespace, _ := m["namespace"].(string)
		if name == "" {
			continue
		}
		ref := engine.DependsOn(s.Namespace, []v1alpha1.DependencyReference{{Name: name, Namespace: namespace}})[0]
		field := fmt.Sprintf("spec.dependsOn[%d]", i)
		out = append(out, dependency{ref: ref, field: field, pos: position{File: d.file, Line: d.line(field)}})
	}
	return out
}

// findCycles adds a finding to every ManifestSync on a cycle of
// spec.dependsOn among those checked, at its dependsOn entry that leads
// around the cycle, naming the cycle and where each step of it is. A
// dependency on a ManifestSync that vet did not read is none of its
// business (it may exist in the cluster). Two documents of one
// namespace/name (say, one per environment) count as one ManifestSync
// whose dependencies are those of both, and each is reported only when
// its own entries lead around the cycle.
func findCycles(syncs []*syncReport, docs []*syncDoc) {
	deps := map[engine.SyncRef][]dependency{}
	refs := make([]engine.SyncRef, len(syncs))
	for i, s := range syncs {
		refs[i] = engine.SyncRef{Namespace: s.Namespace, Name: s.Name}
		deps[refs[i]] = append(deps[refs[i]], s.dependencies(docs[i])...)
	}
	next := func(ref engine.SyncRef) []engine.SyncRef {
		var out []engine.SyncRef
		for _, d := range deps[ref] {
			out = append(out, d.ref)
		}
		return out
	}
	for i, s := range syncs {
		cycle := engine.DependencyCycle(refs[i], next)
		if cycle == nil {
			continue
		}
		for _, d := range s.dependencies(docs[i]) {
			if d.ref != cycle[1] {
				continue
			}
			s.Findings = append(s.Findings, &finding{
				Category: categorySpec, Rule: ruleCycle, Field: d.field,
				Message: cycleMessage(cycle, deps), Pos: d.pos, Sync: d.pos, SyncName: s.displayName(),
			})
			break
		}
	}
}

// cycleMessage names a cycle with the place of each step after the
// first, where its dependsOn entry leads on: "cycle: a -> b (b.yaml:9) ->
// a".
func cycleMessage(cycle []engine.SyncRef, deps map[engine.SyncRef][]dependency) string {
	var b strings.Builder
	b.WriteString("cycle: ")
	b.WriteString(cycle[0].String())
	for i := 1; i < len(cycle); i++ {
		fmt.Fprintf(&b, " -> %s", cycle[i])
		if i+1 < len(cycle) {
			for _, d := range deps[cycle[i]] {
				if d.ref == cycle[i+1] {
					fmt.Fprintf(&b, " (%s)", d.pos)
					break
				}
			}
		}
	}
	return b.String()
}
