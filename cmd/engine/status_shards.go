package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/shard"
)

// ShardStatus is what engine status --shards shows: the replicas of an
// operator run with --shards auto, from their Leases, and how the
// ManifestSyncs are shared between them, from their labels. Its JSON is
// that of -o json.
type ShardStatus struct {
	// Namespace holds the Leases (--operator-namespace).
	Namespace string `json:"namespace"`
	// ManifestSyncNamespace is the namespace of the ManifestSyncs counted
	// (-n); empty: every namespace.
	ManifestSyncNamespace string `json:"manifestSyncNamespace,omitempty"`
	// LeaderLease is the name of the leader Lease, whose holder runs the
	// sharder; Sharder is that holder while the Lease is live, else "".
	LeaderLease string `json:"leaderLease"`
	Sharder     string `json:"sharder,omitempty"`
	// Now is the time each Lease is judged at: the API server's clock
	// (Clock "server", the Date of its answer, to the second), or this
	// machine's when the answer had none (Clock "local").
	Now      time.Time      `json:"now"`
	Clock    string         `json:"clock"`
	Replicas []ShardReplica `json:"replicas"`
	// Unowned counts the ManifestSyncs no replica owns yet.
	Unowned int `json:"unowned"`
}

// ShardReplica is one replica: a Lease manifestsync-shard-ID, or an ID
// that ManifestSyncs are labelled with though no Lease has it (State
// "no lease": a replica that left, whose ManifestSyncs the sharder has not
// moved yet).
type ShardReplica struct {
	ID     string `json:"id"`
	Holder string `json:"holder,omitempty"`
	// RenewTime is the Lease's last renewal, by the replica's clock;
	// RenewedAgo is Now less it, in seconds.
	RenewTime            *time.Time `json:"renewTime,omitempty"`
	RenewedAgo           float64    `json:"renewedAgoSeconds,omitempty"`
	LeaseDurationSeconds int32      `json:"leaseDurationSeconds,omitempty"`
	// State is "live" (renewTime + leaseDurationSeconds is after Now),
	// "expired", "no lease", or "not its holder" (a Lease held under
	// another ID, which the sharder counts as no member).
	State string `json:"state"`
	// Owned counts the ManifestSyncs labelled with this ID, Draining
	// those of them told to move (shard.manifestsync.dev/drain).
	Owned    int  `json:"owned"`
	Draining int  `json:"draining"`
	Sharder  bool `json:"sharder,omitempty"`
}

// Replica states.
const (
	shardLive     = "live"
	shardExpired  = "expired"
	shardNoLease  = "no lease"
	shardNotOwner = "not its holder"
)

// shardPage is how many Leases or ManifestSyncs one list request returns:
// reading a large cluster holds one page at a time.
var shardPage int64 = 500

// runStatusShards reads the Leases of opNS and the labels of the
// ManifestSyncs of msNS (every namespace when "") and writes the replicas.
func runStatusShards(ctx context.Context, stdout io.Writer, f *statusFlags, args []string) error {
	if len(args) > 0 {
		return usageErr("status: --shards shows every replica: it takes no NAME")
	}
	sel, err := labels.Parse(f.watchSelector)
	if err != nil {
		return usageErr("status: --watch-label-selector %q: %v", f.watchSelector, err)
	}
	if f.operatorNS == "" {
		return usageErr("status: --operator-namespace must name the operator's namespace")
	}
	cfg, _, err := f.config("status", "")
	if err != nil {
		return err
	}
	clock := &dateClock{}
	cfg.Wrap(clock.wrap)
	scheme := runtime.NewScheme()
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return usageErr("status: connecting to %s: %w", cfg.Host, err)
	}
	st, err := readShards(ctx, c, clock, f.operatorNS, f.namespace, sel)
	if err != nil {
		return err
	}
	if f.output == "json" {
		return printJSON(stdout, st)
	}
	return writeShards(stdout, st)
}

// readShards builds the ShardStatus from the Leases of opNS and the
// ManifestSyncs of msNS that sel matches.
func readShards(ctx context.Context, c client.Reader, clock *dateClock, opNS, msNS string, sel labels.Selector) (*ShardStatus, error) {
	st := &ShardStatus{Namespace: opNS, ManifestSyncNamespace: msNS, LeaderLease: leaderElectionID(sel), Replicas: []ShardReplica{}}
	// The Leases of the namespace, a page at a time, of which only the
	// replicas' and the leader's are kept.
	var mine []coordinationv1.Lease
	var leader *coordinationv1.Lease
	leases := &coordinationv1.LeaseList{}
	opts := []client.ListOption{client.InNamespace(opNS), client.Limit(shardPage)}
	for {
		if err := c.List(ctx, leases, opts...); err != nil {
			return nil, forbidden(err, "list", "leases.coordination.k8s.io", opNS)
		}
		for i := range leases.Items {
			l := &leases.Items[i]
			if l.Name == st.LeaderLease {
				leader = l.DeepCopy()
			}
			if id, ok := strings.CutPrefix(l.Name, shard.LeasePrefix); ok && shard.ValidateID(id) == nil {
				mine = append(mine, *l.DeepCopy())
			}
		}
		if leases.Continue == "" {
			break
		}
		opts = append(opts[:2:2], client.Continue(leases.Continue))
	}
	st.Now, st.Clock = clock.now()
	byID := map[string]*ShardReplica{}
	for i := range mine {
		l := &mine[i]
		id := strings.TrimPrefix(l.Name, shard.LeasePrefix)
		r := &ShardReplica{ID: id, State: shardExpired}
		if l.Spec.HolderIdentity != nil {
			r.Holder = *l.Spec.HolderIdentity
		}
		if d := l.Spec.LeaseDurationSeconds; d != nil {
			r.LeaseDurationSeconds = *d
		}
		if rt := l.Spec.RenewTime; rt != nil {
			t := rt.UTC()
			r.RenewTime = &t
			r.RenewedAgo = max(st.Now.Sub(t), 0).Round(100 * time.Millisecond).Seconds()
		}
		switch {
		case r.Holder != id:
			r.State = shardNotOwner
		case live(l, st.Now):
			r.State = shardLive
		}
		byID[id] = r
	}
	if leader != nil && leader.Spec.HolderIdentity != nil && live(leader, st.Now) {
		st.Sharder = *leader.Spec.HolderIdentity
		if r := byID[st.Sharder]; r != nil {
			r.Sharder = true
		}
	}

	// Only the labels count: the list asks for metadata alone, a page at
	// a time.
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("ManifestSyncList"))
	opts = []client.ListOption{client.InNamespace(msNS), client.MatchingLabelsSelector{Selector: sel}, client.Limit(shardPage)}
	for {
		if err := c.List(ctx, list, opts...); err != nil {
			return nil, forbidden(err, "list", "manifestsyncs.manifestsync.dev", msNS)
		}
		for _, ms := range list.Items {
			owner := ms.Labels[shard.OwnerLabel]
			if owner == "" {
				st.Unowned++
				continue
			}
			r := byID[owner]
			if r == nil {
				r = &ShardReplica{ID: owner, State: shardNoLease}
				byID[owner] = r
			}
			r.Owned++
			if ms.Labels[shard.DrainLabel] != "" {
				r.Draining++
			}
		}
		if list.Continue == "" {
			break
		}
		opts = append(opts[:3:3], client.Continue(list.Continue))
	}
	for _, r := range byID {
		st.Replicas = append(st.Replicas, *r)
	}
	slices.SortFunc(st.Replicas, func(a, b ShardReplica) int { return cmp.Compare(a.ID, b.ID) })
	return st, nil
}

// live says whether l's holder still holds it at now: renewTime (else
// acquireTime) plus leaseDurationSeconds is after it.
func live(l *coordinationv1.Lease, now time.Time) bool {
	at := l.Spec.RenewTime
	if at == nil {
		at = l.Spec.AcquireTime
	}
	if at == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return at.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second).After(now)
}

// forbidden names the permission a refused read needed.
func forbidden(err error, verb, resource, namespace string) error {
	where := "in namespace " + namespace
	if namespace == "" {
		where = "in every namespace"
	}
	if apierrors.IsForbidden(err) {
		return usageErr("status: --shards needs permission to %s %s %s: %w", verb, resource, where, err)
	}
	return usageErr("status: listing %s %s: %w", resource, where, err)
}

// writeShards writes st as a table, the unowned count, the sharder and
// how liveness was judged.
func writeShards(w io.Writer, st *ShardStatus) error {
	// The table is written to a buffer first, so that the padding of a
	// last column left empty does not end its lines.
	var table bytes.Buffer
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tHOLDER\tRENEWED\tSTATE\tOWNED\tDRAINING\tSHARDER")
	for _, r := range st.Replicas {
		renewed, sharder := "-", ""
		if r.RenewTime != nil {
			renewed = (time.Duration(r.RenewedAgo * float64(time.Second))).String() + " ago"
		}
		if r.Sharder {
			sharder = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", r.ID, cmp.Or(r.Holder, "-"), renewed, r.State, r.Owned, r.Draining, sharder)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for line := range strings.Lines(table.String()) {
		if _, err := io.WriteString(w, strings.TrimRight(line, " \n")+"\n"); err != nil {
			return err
		}
	}
	where := "of every namespace"
	if st.ManifestSyncNamespace != "" {
		where = "of namespace " + st.ManifestSyncNamespace
	}
	fmt.Fprintf(w, "\nUnowned: %d ManifestSyncs %s.\n", st.Unowned, where)
	if st.Sharder != "" {
		fmt.Fprintf(w, "Sharder: %s, holder of the Lease %s/%s.\n", st.Sharder, st.Namespace, st.LeaderLease)
	} else {
		fmt.Fprintf(w, "Sharder: none: the Lease %s/%s is expired or absent.\n", st.Namespace, st.LeaderLease)
	}
	clock := "the API server's clock"
	if st.Clock != "server" {
		clock = "this machine's clock"
	}
	_, err := fmt.Fprintf(w, "Live: renewTime + leaseDurationSeconds after %s, %s;\nan estimate, as each replica's own clock wrote its renewTime.\n",
		st.Now.UTC().Format(time.RFC3339), clock)
	return err
}

// dateClock keeps the Date of the API server's last answer: Leases are
// judged by the server's clock rather than this machine's, which may be
// far off (the replicas' clocks, which wrote renewTime, are the cluster's).
type dateClock struct {
	mu   sync.Mutex
	date time.Time
}

func (d *dateClock) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil {
			if t, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
				d.mu.Lock()
				d.date = t
				d.mu.Unlock()
			}
		}
		return resp, err
	})
}

// now is the server's last Date and "server", else the local time and
// "local".
func (d *dateClock) now() (time.Time, string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.date.IsZero() {
		return time.Now().UTC(), "local"
	}
	return d.date.UTC(), "server"
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
