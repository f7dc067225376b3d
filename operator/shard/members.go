package shard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Tracker tells which replicas are live from their Leases, by the clock of
// the process that reads them, as client-go's leader election does: a
// Lease is live until LeaseDurationSeconds after this process first saw
// its current renewTime (or holder), so that clocks that disagree between
// nodes do not make a live replica look expired. One exception, so that a
// new leader's sharder does not wait a whole duration more for a replica
// that died before it started: a renewTime seen for the first time that
// is older than ClockSkew counts as seen at renewTime + ClockSkew. That is
// safe while clocks differ by less than ClockSkew plus the fence's margin
// (2 s + 5 s by default): the replica stopped writing by then.
type Tracker struct {
	Reader    client.Reader
	Namespace string
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu   sync.Mutex
	seen map[string]observed // by Lease name
}

// ClockSkew is how far the clocks of the replicas may be behind the
// sharder's, beyond the fence's margin, for a Lease seen for the first time
// to be judged by its renewTime.
const ClockSkew = 2 * time.Second

type observed struct {
	holder, renew string
	at            time.Time
	duration      time.Duration
}

// LiveMember is a live replica.
type LiveMember struct {
	ID string
	// Expires is when it stops being live unless its Lease is renewed.
	Expires time.Time
}

// Live lists the Leases of the namespace and returns the live members, by
// ID, and when the next of them expires if not renewed (zero if none).
func (t *Tracker) Live(ctx context.Context) ([]LiveMember, error) {
	var leases coordinationv1.LeaseList
	if err := t.Reader.List(ctx, &leases, client.InNamespace(t.Namespace)); err != nil {
		return nil, fmt.Errorf("listing shard leases in %s: %w", t.Namespace, err)
	}
	now := time.Now
	if t.Now != nil {
		now = t.Now
	}
	at := now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen == nil {
		t.seen = map[string]observed{}
	}
	var live []LiveMember
	present := map[string]bool{}
	for i := range leases.Items {
		l := &leases.Items[i]
		id, ok := strings.CutPrefix(l.Name, LeasePrefix)
		if !ok || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != id || ValidateID(id) != nil {
			continue
		}
		present[l.Name] = true
		o := observed{holder: id, duration: DefaultLeaseDuration}
		if l.Spec.RenewTime != nil {
			o.renew = l.Spec.RenewTime.UTC().Format(time.RFC3339Nano)
		}
		if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
			o.duration = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		if prev, ok := t.seen[l.Name]; ok && prev.holder == o.holder && prev.renew == o.renew {
			o.at = prev.at
		} else {
			o.at = at
			if rt := l.Spec.RenewTime; rt != nil && rt.Add(ClockSkew).Before(at) {
				o.at = rt.Add(ClockSkew)
			}
		}
		t.seen[l.Name] = o
		if exp := o.at.Add(o.duration); exp.After(at) {
			live = append(live, LiveMember{ID: id, Expires: exp})
		}
	}
	for name := range t.seen {
		if !present[name] {
			delete(t.seen, name)
		}
	}
	slices.SortFunc(live, func(a, b LiveMember) int { return strings.Compare(a.ID, b.ID) })
	return live, nil
}
