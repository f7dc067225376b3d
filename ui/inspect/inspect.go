// Package inspect reads, as one user, what the web UI shows of one
// ManifestSync beyond its status: the tree of each target's objects with
// the objects the cluster made for them, their health and live YAML; the
// events of the ManifestSync and of its objects; the files changed between
// two history entries' git revisions; and what a sync would change now (the
// server-side dry run of `engine diff`, through the same code).
//
// Every read goes through the client it is given, which is the user's
// (their kubeconfig, or impersonation of them): nothing here reads with
// the operator's rights. Secret values never leave it: Secrets' data is
// masked in YAML and diffs, and the evaluation's redactor masks the values
// it read elsewhere. It renders nothing (package ui does) and imports
// nothing of net/http.
package inspect

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/operator/view"
)

// Evaluator evaluates a ManifestSync of the cluster as the operator would
// now, for a diff: its sources fetched as its spec says, in-cluster inputs
// read through c (the user's client), in a sandboxed worker under the
// usual limits. The Result's Redactor knows every Secret value it read.
// cmd/engine provides the one `engine ui` and `engine operator` use.
type Evaluator interface {
	Evaluate(ctx context.Context, c client.Client, ms *v1alpha1.ManifestSync) (*engine.Result, error)
}

// Target is one target row of the status and the tree of its objects.
type Target struct {
	view.Target
	// Waves are the target's objects grouped by wave, lowest first.
	Waves []Wave `json:"waves"`
	// Note says what of the target was left out (objects past the limit
	// of one call); empty when nothing was.
	Note string `json:"note,omitempty"`
}

// Wave is the objects of one wave of a target, in the order they apply.
type Wave struct {
	Wave  int    `json:"wave"`
	Nodes []Node `json:"nodes"`
}

// Node is one object of a target's tree: an object of the inventory, or
// one the cluster made for it (a ReplicaSet of a Deployment, a Pod of a
// ReplicaSet, a Job of a CronJob), found by owner references.
type Node struct {
	Group     string `json:"group,omitempty"`
	Version   string `json:"version"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	// Managed is true for an object of the inventory, false for one the
	// cluster made.
	Managed bool `json:"managed"`
	// State is Synced, Drifted or Missing (view.State*) for a managed
	// object; empty for one the cluster made.
	State string `json:"state,omitempty"`
	// Health is kstatus's (or spec.healthChecks') judgement: Current,
	// InProgress, Failed, Terminating, NotFound or Unknown; empty when it
	// could not be judged (an object of a remote cluster).
	Health        string `json:"health,omitempty"`
	HealthMessage string `json:"healthMessage,omitempty"`
	// YAML is the live object, its managedFields left out and a Secret's
	// values masked; empty when there is none.
	YAML string `json:"yaml,omitempty"`
	// Error says why the object could not be read (the API server's
	// message, such as forbidden); empty when it was.
	Error string `json:"error,omitempty"`
	// Note says what was left out of the node: its YAML cut at the size
	// limit, its children not listed (forbidden) or cut at the limit of
	// one list; empty when nothing was.
	Note string `json:"note,omitempty"`
	// Children are the objects the cluster made for this one.
	Children []Node `json:"children,omitempty"`
}

// Event is one Kubernetes event of the ManifestSync or of one of its
// objects.
type Event struct {
	// Object names what the event is about: "Kind namespace/name".
	Object  string      `json:"object"`
	Type    string      `json:"type"`
	Reason  string      `json:"reason"`
	Message string      `json:"message"`
	Count   int32       `json:"count,omitempty"`
	Last    metav1.Time `json:"last"`
	// Source is the component that reported it.
	Source string `json:"source,omitempty"`
}

// SourceChange is what changed in one git source between two history
// entries.
type SourceChange struct {
	Source string `json:"source"`
	// From and To are the two entries' revisions of the source.
	From string `json:"from"`
	To   string `json:"to"`
	// Files are the paths changed, sorted; empty when the revisions are
	// the same.
	Files []FileChange `json:"files,omitempty"`
	// Note says why the files could not be listed (not a git source, a
	// commit no longer fetchable); empty when they were.
	Note string `json:"note,omitempty"`
}

// FileChange is one path changed between two revisions.
type FileChange struct {
	Path string `json:"path"`
	// Change is Added, Modified or Deleted.
	Change string `json:"change"`
}

// ObjectDiff is what a sync would do now to one object.
type ObjectDiff struct {
	// Target is the target's ID.
	Target string `json:"target"`
	// Object names the object: "Kind namespace/name".
	Object string `json:"object"`
	// Action is Created, Configured, Unchanged, Skipped, Conflict, Failed
	// or Pruned, as `engine diff` says.
	Action string `json:"action"`
	// Unified is the unified diff of the live object to the object as the
	// apply would leave it (YAML, Secret values masked); empty when
	// nothing changes.
	Unified string `json:"unified,omitempty"`
	// Error says why it conflicts or would fail.
	Error string `json:"error,omitempty"`
}
