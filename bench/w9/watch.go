package w9

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/shard"
)

// syncState is what the watch last saw of one ManifestSync.
type syncState struct {
	generation   int64
	ready        bool // Ready at its generation
	readyAt      time.Time
	owner, drain string
}

// ownerChange is a change of a ManifestSync's owner label, as the watch
// saw it (no earlier than the API server wrote it).
type ownerChange struct {
	key, from, to string
	at            time.Time
}

// tracker follows the ManifestSyncs of the workload from a watch of its
// own: which are Ready at their generation since when, and who owns them.
type tracker struct {
	mu      sync.Mutex
	syncs   map[string]*syncState
	changes []ownerChange
	errs    int

	cancel context.CancelFunc
	done   chan struct{}
}

// track lists and then watches the ManifestSyncs labelled as the
// workload's, until stop; a watch that ends is resumed from the last
// resourceVersion seen, or relisted when that is too old.
func track(c client.WithWatch) (*tracker, error) {
	t := &tracker{syncs: map[string]*syncState{}, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel = cancel
	rv, err := t.list(ctx, c)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer close(t.done)
		for ctx.Err() == nil {
			w, err := c.Watch(ctx, &v1alpha1.ManifestSyncList{}, client.MatchingLabels{syncLabel: "sync"},
				&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true}})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			gone := false
			for ev := range w.ResultChan() {
				switch ev.Type {
				case watch.Error:
					gone = true
				case watch.Bookmark:
					if o, ok := ev.Object.(*v1alpha1.ManifestSync); ok {
						rv = o.ResourceVersion
					}
				case watch.Added, watch.Modified:
					if ms, ok := ev.Object.(*v1alpha1.ManifestSync); ok {
						rv = ms.ResourceVersion
						t.see(ms, time.Now())
					}
				case watch.Deleted:
					if ms, ok := ev.Object.(*v1alpha1.ManifestSync); ok {
						rv = ms.ResourceVersion
						t.mu.Lock()
						delete(t.syncs, ms.Namespace+"/"+ms.Name)
						t.mu.Unlock()
					}
				}
				if gone {
					break
				}
			}
			w.Stop()
			if gone && ctx.Err() == nil {
				t.mu.Lock()
				t.errs++
				t.mu.Unlock()
				if r, err := t.list(ctx, c); err == nil {
					rv = r
				}
			}
		}
	}()
	return t, nil
}

// list reads every ManifestSync of the workload, replacing what the
// tracker held, and returns the list's resourceVersion.
func (t *tracker) list(ctx context.Context, c client.Reader) (string, error) {
	var list v1alpha1.ManifestSyncList
	if err := c.List(ctx, &list, client.MatchingLabels{syncLabel: "sync"}); err != nil {
		return "", fmt.Errorf("listing ManifestSyncs: %w", err)
	}
	now := time.Now()
	t.mu.Lock()
	seen := map[string]bool{}
	for i := range list.Items {
		seen[list.Items[i].Namespace+"/"+list.Items[i].Name] = true
	}
	for k := range t.syncs {
		if !seen[k] {
			delete(t.syncs, k)
		}
	}
	t.mu.Unlock()
	for i := range list.Items {
		t.see(&list.Items[i], now)
	}
	return list.ResourceVersion, nil
}

func (t *tracker) see(ms *v1alpha1.ManifestSync, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	k := ms.Namespace + "/" + ms.Name
	s, ok := t.syncs[k]
	if !ok {
		s = &syncState{}
		t.syncs[k] = s
	}
	owner := ms.Labels[shard.OwnerLabel]
	if ok && owner != s.owner {
		t.changes = append(t.changes, ownerChange{key: k, from: s.owner, to: owner, at: at})
	}
	s.owner, s.drain = owner, ms.Labels[shard.DrainLabel]
	ready := ms.Status.ObservedGeneration == ms.Generation && apimeta.IsStatusConditionTrue(ms.Status.Conditions, v1alpha1.ConditionReady)
	if ready && (!s.ready || s.generation != ms.Generation) {
		s.readyAt = at
	}
	s.ready, s.generation = ready, ms.Generation
}

// stop ends the watch.
func (t *tracker) stop() {
	t.cancel()
	<-t.done
}

// wait polls cond over the tracker's state until it holds, ctx ends or
// timeout passes; what is the state's description for an error.
func (t *tracker) wait(ctx context.Context, timeout time.Duration, cond func(map[string]*syncState) (bool, string)) error {
	deadline := time.Now().Add(timeout)
	for {
		t.mu.Lock()
		ok, what := cond(t.syncs)
		t.mu.Unlock()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s: %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), errors.New(what))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// owners returns each ManifestSync's owner (draining ones as "").
func (t *tracker) owners() map[string]string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]string, len(t.syncs))
	for k, s := range t.syncs {
		if s.drain == "" {
			out[k] = s.owner
		} else {
			out[k] = ""
		}
	}
	return out
}
