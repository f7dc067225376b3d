package controller

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
)

// pruneResult is the inventory after a sync and what pruning did.
type pruneResult struct {
	// inventory points into the targets' records (a fan-out's tens of
	// thousands of items are not copied to be written).
	inventory []*inventoryItem
	pruned    []v1alpha1.ObjectID
	err       error
}

// prune deletes the objects of the last inventory (as the sync read it
// before applying) that no target wants any more. A target's old objects are pruned only when all of its own
// objects were applied: a failed or conflicting target keeps its previous
// inventory, so that nothing is lost while it is broken.
func (r *Reconciler) prune(ctx context.Context, ms *v1alpha1.ManifestSync, outcomes []*targetOutcome, inventory iter.Seq[inventoryItem]) pruneResult {
	var res pruneResult
	objects := 0 // sized at once: with a fan-out, tens of thousands
	for _, o := range outcomes {
		objects += o.target.Len()
	}
	res.inventory = make([]*inventoryItem, 0, objects)
	done := map[string]bool{}    // targets that synced completely
	present := map[string]bool{} // targets of this evaluation
	// A complete record has an entry per desired object: a steady
	// fan-out's copies are not made again to be named. The objects of
	// the other targets are made again.
	complete := map[string]*targetRecord{}
	refs := map[string]string{} // the targets' clusters, as inventory items name them
	var made []clusterObject
	for _, o := range outcomes {
		id := o.target.ID()
		present[id] = true
		if o.ok() {
			done[id] = true
		}
		ref := clusterRefOf(ms, o.target)
		refs[id] = ref
		if o.record != nil && !o.record.partial {
			complete[id] = o.record
		} else {
			objs, err := o.target.Manifests()
			if err != nil {
				delete(done, id) // its inventory is kept whole
			}
			for _, obj := range objs {
				made = append(made, clusterObject{ref, v1alpha1.IDOf(obj)})
			}
		}
		res.inventory = o.appendOwned(res.inventory)
	}
	// wanted reports whether some target wants the inventory's object:
	// its own target's record names it (the inventory of a steady
	// fan-out, whose targets are small), or, made at the first that is
	// not so (or of a large target), a set of every target's objects.
	var desired map[clusterObject]bool
	wanted := func(it inventoryItem) bool {
		if rec := complete[it.target]; rec != nil && len(rec.objects) <= 64 && refs[it.target] == it.cluster && rec.names(it.id) {
			return true
		}
		if desired == nil {
			desired = make(map[clusterObject]bool, objects)
			for id, rec := range complete {
				for _, a := range rec.objects {
					desired[clusterObject{refs[id], a.item.id}] = true
				}
			}
			for _, o := range made {
				desired[o] = true
			}
		}
		return desired[clusterObject{it.cluster, it.id}]
	}
	var (
		errs       []error
		candidates []pruneCandidate
	)
	keep := func(it inventoryItem, err error) {
		if !slices.Contains(errs, err) { // a cluster's failure, once
			errs = append(errs, err)
		}
		res.inventory = append(res.inventory, &it) // retried next time
	}
	clusters := clusterMemo{r: r, ms: ms}
	fail := func(it inventoryItem, c *cluster, err error) error {
		return clusters.failure(it.cluster, c, err)
	}
	var reads []pruneCandidate
	for it := range inventory {
		if present[it.target] && !done[it.target] {
			res.inventory = append(res.inventory, &it) // keep until the target syncs
			continue
		}
		if wanted(it) {
			continue // still wanted (maybe by another target)
		}
		if ms.Spec.Policy.Prune != nil && !*ms.Spec.Policy.Prune {
			continue // forgotten, not deleted
		}
		c, err := clusters.get(ctx, it.cluster)
		if err != nil {
			keep(it, err)
			continue
		}
		reads = append(reads, pruneCandidate{it: it, c: c})
	}
	for i, err := range r.readOwned(ctx, ms, &clusters, reads) {
		p := reads[i]
		switch {
		case err != nil:
			keep(p.it, fail(p.it, p.c, err))
		case p.obj != nil:
			candidates = append(candidates, p)
		}
	}
	// The last wave goes first, so that what the first waves set up
	// (CRDs, namespaces, a database) outlives what uses it.
	slices.SortStableFunc(candidates, func(a, b pruneCandidate) int { return b.wave() - a.wave() })
	for wave := range waves(candidates) {
		results := clusters.eachOf(len(wave), func(i int) string { return wave[i].it.cluster }, func(i int) error {
			p := &wave[i]
			var err error
			p.deleted, err = deleteOwned(ctx, p.c, p.it, p.obj)
			return err
		})
		for i, err := range results {
			p := wave[i]
			switch {
			case err != nil:
				keep(p.it, fail(p.it, p.c, err))
			case p.deleted:
				res.pruned = append(res.pruned, p.it.id)
			}
		}
	}
	res.err = errors.Join(errs...)
	return res
}

// roundTrips bounds the reads and deletions of one prune or deletion in
// flight at once. Each is a round trip to an API server: a thousand of
// them one after another take seconds on a local one and minutes on a
// remote cluster's.
const roundTrips = 8

// readOwned reads the live metadata of each of reads (ownedObject) into its
// obj, a few at a time, and returns each one's error.
func (r *Reconciler) readOwned(ctx context.Context, ms *v1alpha1.ManifestSync, clusters *clusterMemo, reads []pruneCandidate) []error {
	return clusters.eachOf(len(reads), func(i int) string { return reads[i].it.cluster }, func(i int) error {
		p := &reads[i]
		var err error
		p.obj, err = r.ownedObject(ctx, ms, p.c, p.it)
		return err
	})
}

// waves yields the runs of one wave of candidates, sorted by wave.
func waves(candidates []pruneCandidate) iter.Seq[[]pruneCandidate] {
	return func(yield func([]pruneCandidate) bool) {
		for start := 0; start < len(candidates); {
			end := start + 1
			for end < len(candidates) && candidates[end].wave() == candidates[start].wave() {
				end++
			}
			if !yield(candidates[start:end]) {
				return
			}
			start = end
		}
	}
}

// eachOf calls call(i) for each i below n, roundTrips at once, and
// returns each call's error. The call of an object whose cluster (ref(i))
// has failed as a whole, in the memo or at an earlier call of this run
// (clusterFailure), is not made: its error is that failure's.
func (m *clusterMemo) eachOf(n int, ref func(int) string, call func(int) error) []error {
	if n == 0 {
		return nil // a steady sync: nothing to read or delete
	}
	errs := make([]error, n)
	var (
		mu   sync.Mutex
		down = map[string]error{}
		next atomic.Int64
		wg   sync.WaitGroup
	)
	failed := func(ref string) error {
		if err := m.errs[ref]; err != nil {
			return err // m is not written until every call returned
		}
		mu.Lock()
		defer mu.Unlock()
		return down[ref]
	}
	for range min(n, roundTrips) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				ref := ref(i)
				if errs[i] = failed(ref); errs[i] != nil {
					continue
				}
				if errs[i] = call(i); errs[i] != nil && clusterFailure(errs[i]) != "" {
					mu.Lock()
					if down[ref] == nil {
						down[ref] = errs[i]
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return errs
}

// failure is err, an object's failure in the cluster ref (c), as its
// pass reports it: the first failure of a cluster as a whole, named by
// the cluster, fails its other objects with the same error, once.
func (m *clusterMemo) failure(ref string, c *cluster, err error) error {
	why := clusterFailure(err)
	if why == "" || c == nil {
		return err
	}
	if prev := m.errs[ref]; prev != nil {
		return prev
	}
	err = fmt.Errorf("cluster %q: %s: %w", c.name, why, err)
	m.fail(ref, err)
	return err
}

// pruneCandidate is an inventory object of ours to prune: obj is its
// live metadata, once read, and deleted says whether it was deleted.
type pruneCandidate struct {
	it      inventoryItem
	c       *cluster
	obj     *metav1.PartialObjectMetadata
	deleted bool
}

// wave is the candidate's wave, as the live object has it (the desired
// one is gone); an invalid annotation counts as wave 0.
func (p pruneCandidate) wave() int {
	return engine.WaveOfAnnotations(p.obj.Annotations)
}

// deleteOwned deletes obj, the live metadata of an object of ours, unless
// it is marked with PruneAnnotation or, since it was read, was deleted or
// replaced; it reports whether it deleted it. Objects no longer ours
// (someone took one over by removing our label) are never read as ours
// (see ownedObject).
func deleteOwned(ctx context.Context, c *cluster, it inventoryItem, obj *metav1.PartialObjectMetadata) (bool, error) {
	return ssa.Delete(ctx, c.client, it.id, obj)
}

// orphanOwned removes our label and digest annotation from obj, the live
// metadata of an object of ours, leaving it otherwise as it is.
func orphanOwned(ctx context.Context, c *cluster, it inventoryItem, obj *metav1.PartialObjectMetadata) error {
	return ssa.Orphan(ctx, c.client, it.id, obj)
}

// ownedObject reads the metadata of an inventory object from the API
// server; nil when it is gone, its kind is no longer served, it is no
// longer ours, or it is now a hook (an object of ours made a hook).
func (r *Reconciler) ownedObject(ctx context.Context, ms *v1alpha1.ManifestSync, c *cluster, it inventoryItem) (*metav1.PartialObjectMetadata, error) {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(it.gvk())
	if err := c.live.Get(ctx, objectKey(it.id), obj); err != nil {
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading %s: %w", it.id.String(), err)
	}
	if obj.Labels[OwnerLabel] != r.Options.owner(ms) || obj.Labels[HookLabel] != "" {
		return nil, nil // not ours, or now a hook: hooks are never pruned
	}
	return obj, nil
}
