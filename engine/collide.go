package engine

import (
	"fmt"
	"strings"

	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// Collision is an object that two targets of one evaluation both write:
// the same cluster, namespace, group/kind and name. Applying both would
// have them rewrite each other's copy forever.
type Collision struct {
	// Object names the object: "ConfigMap web/settings".
	Object string `json:"object"`
	// Other is the ID of the other target that writes it.
	Other string `json:"other"`
}

// CollisionError fails a target that writes objects another target of the
// same evaluation writes too.
type CollisionError struct {
	Collisions []Collision
}

// maxCollisionsShown bounds the message of a CollisionError; the rest are
// counted.
const maxCollisionsShown = 5

func (e *CollisionError) Error() string {
	msgs := make([]string, 0, min(len(e.Collisions), maxCollisionsShown))
	for _, c := range e.Collisions[:min(len(e.Collisions), maxCollisionsShown)] {
		msgs = append(msgs, c.String())
	}
	if n := len(e.Collisions) - len(msgs); n > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more", n))
	}
	return strings.Join(msgs, "; ")
}

func (c Collision) String() string {
	return fmt.Sprintf("%s is also written by target %q", c.Object, c.Other)
}

// clusterKey tells the clusters of targets apart: targets of one
// kubeconfig Secret key write to one cluster.
func clusterKey(t *v1alpha1.Target) string {
	if t.Cluster == nil {
		return ""
	}
	ref := t.Cluster.KubeConfigSecretRef
	return ref.Name + "/" + ref.Key
}

// refuseCollisions fails every target that writes an object another
// target writes too, naming the other target, and leaves the others
// alone: one bad pair of targets must not block the rest. Targets that
// failed already are not looked at. clusters[i] is targets[i]'s cluster key.
func refuseCollisions(targets []*TargetResult, clusters []string) {
	type key struct {
		cluster string
		id      v1alpha1.ObjectID
	}
	type owner struct{ target, object int }
	owners := map[key]owner{}
	found := map[int][]Collision{}
	// describe names object j of target i; only a collision asks, so that
	// a fan-out's objects are not named thousands of times for nothing.
	describeObject := func(i, j int) string {
		objs, err := targets[i].Manifests()
		if err != nil || j >= len(objs) {
			return fmt.Sprintf("object [%d] of target %q", j, targets[i].ID())
		}
		return describe(objs[j])
	}
	for i, t := range targets {
		if t == nil || t.Err != nil {
			continue
		}
		objs, err := t.Manifests()
		if err != nil {
			t.Err = err
			t.Objects, t.Digests, t.Digest, t.copies = nil, nil, "", nil
			continue
		}
		for j, o := range objs {
			k := key{clusters[i], v1alpha1.IDOf(o)}
			first, seen := owners[k]
			if !seen {
				owners[k] = owner{target: i, object: j}
				continue
			}
			if first.target == i {
				continue // one target's duplicates fail in evaluateTarget
			}
			found[first.target] = append(found[first.target], Collision{Object: describeObject(first.target, first.object), Other: t.ID()})
			found[i] = append(found[i], Collision{Object: describe(o), Other: targets[first.target].ID()})
		}
	}
	for i, cs := range found {
		t := targets[i]
		t.Collisions = cs
		t.Err = fmt.Errorf("target %q: %w", t.ID(), &CollisionError{Collisions: cs})
		t.Objects, t.Digests, t.Digest, t.copies = nil, nil, "", nil
	}
}
