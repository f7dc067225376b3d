package engine

import (
	"fmt"
	"hash/maphash"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
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
	seed := maphash.MakeSeed()
	refuseCollisionsHashed(targets, clusters, func(k objectKey) uint64 {
		var h maphash.Hash
		h.SetSeed(seed)
		for _, s := range [...]string{k.cluster, k.id.Namespace, k.id.Name, k.id.Group, k.id.Kind} {
			h.WriteString(s)
			h.WriteByte(0)
		}
		return h.Sum64()
	})
}

// objectKey is an object of one cluster.
type objectKey struct {
	cluster string
	id      v1alpha1.ObjectID
}

// refuseCollisionsHashed is refuseCollisions with the hash of the keys.
func refuseCollisionsHashed(targets []*TargetResult, clusters []string, hash func(objectKey) uint64) {
	type key = objectKey
	type owner struct{ target, object int }
	// The first owner of each object, by its key's hash: a fan-out's
	// tens of thousands of objects cost a word each, not their key. A
	// key whose hash another key has (2^-64 per pair) goes to spilled.
	owners := map[uint64]owner{}
	var spilled map[key]owner
	// A compact target's objects are made in scratch maps, read for
	// their ids and let go: only the ids' strings are kept (those of the
	// inputs and the targets).
	s := &scratch{}
	found := map[int][]Collision{}
	// objectOf is object j of target i, made again when the evaluation
	// did not keep it; only a collision (or a hash's) asks, so that a
	// fan-out's objects are not made twice for nothing. The last target
	// asked for is kept: a cluster-scoped object of every target asks
	// for the first one's each time.
	var (
		lastTarget = -1
		lastObjs   []*unstructured.Unstructured
	)
	objectOf := func(i, j int) *unstructured.Unstructured {
		if i != lastTarget {
			lastTarget = i
			lastObjs, _ = targets[i].Manifests()
		}
		if j >= len(lastObjs) {
			return nil
		}
		return lastObjs[j]
	}
	describeObject := func(i, j int) string {
		if o := objectOf(i, j); o != nil {
			return describe(o)
		}
		return fmt.Sprintf("object [%d] of target %q", j, targets[i].ID())
	}
	for i, t := range targets {
		if t == nil || t.Err != nil {
			continue
		}
		objs, err := t.manifestsInto(s)
		if err != nil {
			t.Err = err
			t.Objects, t.Digests, t.Digest, t.copies = nil, nil, "", nil
			continue
		}
		for j, o := range objs {
			if generatedHook(o) {
				continue // each sync names it of its own target's output (NameHook)
			}
			k := key{clusters[i], v1alpha1.IDOf(o)}
			h := hash(k)
			first, seen := owners[h]
			if !seen {
				owners[h] = owner{target: i, object: j}
				continue
			}
			f := objs[first.object]
			if first.target != i {
				f = objectOf(first.target, first.object)
			}
			if f == nil || (key{clusters[first.target], v1alpha1.IDOf(f)}) != k {
				// Another key of the same hash.
				if spilled == nil {
					spilled = map[key]owner{}
				}
				if first, seen = spilled[k]; !seen {
					spilled[k] = owner{target: i, object: j}
					continue
				}
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
