// Package view shows ManifestSyncs as people read them, from their status
// alone: a table of many (Summarize, WriteTable) and, for one, a header,
// a tree of its objects per target with their state, and its last history
// entries (Describe, WriteDetail), as `flux tree` and `argocd app get`
// do; both also as stable JSON documents. `engine status` prints them, and
// the demo prints its table.
//
// It takes ManifestSyncs and returns data or text: it reads no cluster
// (the caller gets the ManifestSyncs), so that what it shows is tested
// without one.
package view

import (
	"maps"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// The states of an object in a target's tree.
const (
	// StateSynced is an object applied and unchanged since, as far as
	// the operator knows.
	StateSynced = "Synced"
	// StateDrifted is an object someone changed, left so by
	// spec.policy.drift Report or Ignore.
	StateDrifted = "Drifted"
	// StateMissing is an object someone deleted, left so by
	// spec.policy.drift Report or Ignore.
	StateMissing = "Missing"
)

// Summary is one ManifestSync in a list.
type Summary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Ready is the Ready condition's status: "True", "False", or
	// "Unknown" when there is none for the current generation yet.
	Ready     string `json:"ready"`
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	Suspended bool   `json:"suspended"`
	// TargetsSynced of TargetsTotal target rows are Synced.
	TargetsSynced int `json:"targetsSynced"`
	TargetsTotal  int `json:"targetsTotal"`
	// Revision is the last applied revision, in full.
	Revision string       `json:"revision,omitempty"`
	LastSync *metav1.Time `json:"lastSync,omitempty"`
}

// List is the JSON document of many ManifestSyncs.
type List struct {
	Items []Summary `json:"items"`
}

// Detail is one ManifestSync in full: the JSON document of `engine status
// NAME`.
type Detail struct {
	Summary
	// Healthy is the Healthy condition's status, and its reason and
	// message; empty when there is none.
	Healthy       string           `json:"healthy,omitempty"`
	HealthReason  string           `json:"healthReason,omitempty"`
	HealthMessage string           `json:"healthMessage,omitempty"`
	Inputs        *v1alpha1.Inputs `json:"inputs,omitempty"`
	Targets       []Target         `json:"targets"`
	// History is the newest entries of status.history, newest first.
	History []v1alpha1.HistoryEntry `json:"history,omitempty"`
}

// Target is one target row and the objects of its inventory.
type Target struct {
	Name string `json:"name"`
	// Cluster is "in-cluster" or the remote cluster's name.
	Cluster   string       `json:"cluster,omitempty"`
	Namespace string       `json:"namespace,omitempty"`
	State     string       `json:"state"`
	Message   string       `json:"message,omitempty"`
	LastSync  *metav1.Time `json:"lastSync,omitempty"`
	// Health is that of the target's objects taken together: Healthy,
	// Progressing, Degraded or Unknown.
	Health  string   `json:"health,omitempty"`
	Objects []Object `json:"objects"`
}

// Object is one inventory entry.
type Object struct {
	// Object is "Kind namespace/name".
	Object    string `json:"object"`
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	State     string `json:"state"`
	// Health is the object's, as Judge found it (Current, InProgress,
	// Failed, Terminating, NotFound or Unknown); empty when not judged.
	Health        string `json:"health,omitempty"`
	HealthMessage string `json:"healthMessage,omitempty"`
}

// Summarize is the list entry of ms.
func Summarize(ms *v1alpha1.ManifestSync) Summary {
	s := Summary{
		Namespace:    ms.Namespace,
		Name:         ms.Name,
		Ready:        string(metav1.ConditionUnknown),
		Suspended:    ms.Spec.Suspend,
		TargetsTotal: len(ms.Status.Targets),
		Revision:     ms.Status.LastAppliedRevision,
		LastSync:     ms.Status.LastSuccessfulSyncTime,
	}
	if c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		s.Reason, s.Message = c.Reason, c.Message
		if c.ObservedGeneration >= ms.Generation {
			s.Ready = string(c.Status)
		}
	}
	for _, t := range ms.Status.Targets {
		if t.State == v1alpha1.TargetSynced {
			s.TargetsSynced++
		}
	}
	return s
}

// Describe is ms in full, with its newest history entries, at most
// history of them. An inventory that cannot be read is an error.
func Describe(ms *v1alpha1.ManifestSync, history int) (Detail, error) {
	inventory, err := ms.InventoryEntries()
	if err != nil {
		return Detail{}, err
	}
	d := Detail{Summary: Summarize(ms), Inputs: ms.Status.Inputs, Targets: []Target{}}
	if c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionHealthy); c != nil {
		d.Healthy, d.HealthReason, d.HealthMessage = string(c.Status), c.Reason, c.Message
	}
	d.History = ms.Status.History[:min(max(history, 0), len(ms.Status.History))]
	byTarget := map[string][]v1alpha1.InventoryEntry{}
	for _, e := range inventory {
		byTarget[e.Target] = append(byTarget[e.Target], e)
	}
	for _, row := range ms.Status.Targets {
		t := Target{Name: row.Name, Cluster: row.Cluster, Namespace: row.Namespace, State: string(row.State), Message: row.Message,
			LastSync: row.LastSyncTime, Health: string(row.Health), Objects: []Object{}}
		// A target of a namespaceSelector has a row per namespace, and
		// its objects are those of "name/namespace".
		for _, id := range []string{row.Name + "/" + row.Namespace, row.Name} {
			if entries, ok := byTarget[id]; ok {
				t.Objects = objects(entries)
				delete(byTarget, id)
				break
			}
		}
		d.Targets = append(d.Targets, t)
	}
	// Objects of a target without a row (the status is being rewritten):
	// shown rather than hidden.
	for _, id := range slices.Sorted(maps.Keys(byTarget)) {
		name, ns, _ := strings.Cut(id, "/")
		d.Targets = append(d.Targets, Target{Name: name, Namespace: ns, State: string(v1alpha1.TargetPending), Objects: objects(byTarget[id])})
	}
	return d, nil
}

// objects are the inventory entries as people read them, in the order
// of the inventory; entries that do not parse show as their id.
func objects(entries []v1alpha1.InventoryEntry) []Object {
	out := make([]Object, 0, len(entries))
	for _, e := range entries {
		o := Object{Object: e.ID, Version: e.Version, State: StateSynced}
		if id, err := e.Object(); err == nil {
			o.Object, o.Group, o.Kind, o.Namespace, o.Name = id.String(), id.Group, id.Kind, id.Namespace, id.Name
		}
		switch {
		case e.Missing:
			o.State = StateMissing
		case e.Drifted:
			o.State = StateDrifted
		}
		out = append(out, o)
	}
	return out
}

// Judge sets the health of every object of d that judge knows: judge is
// given the target and the object and says its health and why, ok false
// when it cannot tell (an object of a remote cluster). The caller reads
// the objects; the view reads no cluster.
func (d *Detail) Judge(judge func(t Target, o Object) (health, message string, ok bool)) {
	for i := range d.Targets {
		t := &d.Targets[i]
		for j := range t.Objects {
			o := &t.Objects[j]
			if h, msg, ok := judge(*t, *o); ok {
				o.Health, o.HealthMessage = h, msg
			}
		}
	}
}
