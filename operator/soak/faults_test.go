package soak

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

type faultKind int

const (
	faultKill faultKind = iota
	faultAPIServer
	faultAPIServerKill
	faultRemote
	faultGit
	faultBlackholeRemote
	faultBlackholeGit
	faultEdit
	faultDelete
	faultChurnSecret
	faultChurnConfigMap
	faultChurnGit
	faultChurnNamespace
	faultPoison
	faultWebhookFlood
	numFaultKinds
)

// outage reports whether the fault takes a peer away for a while.
func (k faultKind) outage() bool { return k <= faultBlackholeGit || k.replica() }

func (k faultKind) String() string {
	if k.replica() {
		return shardFaultNames[k-faultReplicaKill]
	}
	return [...]string{
		"kill -9 of the operator (restarted after 0.5-3 s)",
		"API server stopped (SIGTERM), down 20 s (20-60 s in long runs)",
		"API server killed (SIGKILL), down 20 s (20-60 s in long runs)",
		"remote cluster down 5-20 s (its API server killed)",
		"git server down (5-20 s)",
		"remote cluster blackholed 5-20 s (its port accepts and never answers)",
		"git server blackholed 5-20 s (its port accepts and never answers)",
		"hand edit of a managed object",
		"hand deletion of a managed object",
		"source churn: object-source Secret",
		"source churn: object-source ConfigMap",
		"source churn: git commit",
		"source churn: namespace relabelled (selector)",
		"source value the transform rejects (restored after 3-8 s)",
		"webhook flood (400 unauthenticated 5 MiB posts, then a signed push)",
	}[k]
}

// apiServerOutage is how long the API server stays stopped (at least, in
// long runs), counted from the stop.
const apiServerOutage = 20 * time.Second

// fault is one fault of the schedule, and what became of it.
type fault struct {
	n       int
	phase   int
	kind    faultKind
	at, dur time.Duration // offset in its phase, and length of an outage
	seed    uint64        // the fault's own choices (what to edit, new values)
	slot    int           // the replica a replica fault hits (shards_test.go)
	final   bool          // runs once all the others have ended

	start, end time.Time
	note       string
	skipped    string // why it could not run (the API server was down, say)
	err        error
}

func (f *fault) String() string {
	s := fmt.Sprintf("fault #%d (%s", f.n, f.kind)
	if f.note != "" {
		s += ": " + f.note
	}
	if f.skipped != "" {
		s += "; skipped: " + f.skipped
	}
	return s + ")"
}

// skipReason is an API error's reason, or "unreachable" when there was
// no answer (the API server is stopped).
func skipReason(err error) string {
	if r := apierrors.ReasonForError(err); r != "" {
		return string(r)
	}
	return "unreachable"
}

// schedule draws the faults of one phase of length long from rng: each
// outage at least once (the API server once, ending last; the remote
// cluster and git twice in phases of 2 minutes or more), a kill -9 per
// started minute plus one, a hand edit every 3 s, a source change every
// 4 s and a rejected source value every 30 s, on average, at random
// times, and when all of them are over a hand edit and two source
// changes. Outages of one kind never overlap.
func schedule(rng *rand.Rand, phase int, long time.Duration) []*fault {
	var out []*fault
	add := func(kind faultKind, at, dur time.Duration) {
		out = append(out, &fault{phase: phase, kind: kind, at: at, dur: dur, seed: rng.Uint64()})
	}
	uniform := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rng.Int64N(int64(hi-lo)))
	}
	const margin = 2 * time.Second
	api := faultAPIServer
	if rng.IntN(2) == 0 {
		api = faultAPIServerKill
	}
	for _, kind := range []faultKind{api, faultRemote, faultGit} {
		n := 1
		if long >= 2*time.Minute && kind != api {
			n = 2
		}
		// A peer is down (refusing connections) n times and blackholed
		// (accepting them, never answering) once, in slots of their own.
		slots := n
		blackhole := -1
		if kind != api {
			slots++
			blackhole = rng.IntN(slots)
		}
		slot := (long - margin) / time.Duration(slots)
		for i := range slots {
			if kind == api {
				// It ends last: the changes made once every fault is
				// over show whether the operator's watches came back.
				// Long phases draw longer outages too: the watches'
				// backoff grows with the outage.
				dur := apiServerOutage
				if long >= 2*time.Minute {
					dur = uniform(apiServerOutage, 3*apiServerOutage)
				}
				add(kind, long-margin-dur, dur)
				continue
			}
			dur := uniform(5*time.Second, min(20*time.Second, slot))
			k := kind
			if i == blackhole {
				k = map[faultKind]faultKind{faultRemote: faultBlackholeRemote, faultGit: faultBlackholeGit}[kind]
			}
			add(k, time.Duration(i)*slot+uniform(0, slot-dur), dur)
		}
	}
	end := long - 5*time.Second
	for range 1 + int(long/time.Minute) {
		add(faultKill, uniform(0, end), uniform(500*time.Millisecond, 3*time.Second))
	}
	for range int(long / (3 * time.Second)) {
		kind := faultEdit
		if rng.IntN(4) == 0 {
			kind = faultDelete
		}
		add(kind, uniform(0, end), 0)
	}
	for range int(long / (4 * time.Second)) {
		add(faultChurnSecret+faultKind(rng.IntN(4)), uniform(0, end), 0)
	}
	for range max(1, int(long/(30*time.Second))) {
		dur := uniform(3*time.Second, 8*time.Second)
		add(faultPoison, uniform(0, long-margin-dur), dur)
	}
	for range max(1, int(long/time.Minute)) {
		add(faultWebhookFlood, uniform(0, end), 0)
	}
	slices.SortStableFunc(out, func(a, b *fault) int { return int(a.at - b.at) })
	// At the end, once every other fault is over, changes the operator
	// must notice: convergence is measured after them, so that watches
	// left deaf by a fault show.
	for _, kind := range []faultKind{faultEdit, faultChurnSecret, faultChurnConfigMap} {
		add(kind, long, 0)
		out[len(out)-1].final = true
	}
	return out
}

// runPhase runs the faults at their times, each in a goroutine of its
// own, and returns when every one has ended.
func (r *run) runPhase(ctx context.Context, faults []*fault) {
	begin := time.Now()
	var wg sync.WaitGroup
	for _, f := range faults {
		if f.final {
			wg.Wait()
		}
		if d := time.Until(begin.Add(f.at)); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		r.recordFault(f)
		wg.Go(func() {
			// The fault runs on a copy; the monitor reads the record.
			done := *f
			r.execute(ctx, &done)
			r.faultsMu.Lock()
			*f = done
			f.end = time.Now()
			r.faultsMu.Unlock()
		})
	}
	wg.Wait()
}

func (r *run) recordFault(f *fault) {
	r.faultsMu.Lock()
	defer r.faultsMu.Unlock()
	f.n = len(r.faults) + 1
	f.start = time.Now()
	r.faults = append(r.faults, f)
}

// precedingFault names the last fault that started before at, and the
// outages still under way then.
func (r *run) precedingFault(at time.Time) string {
	r.faultsMu.Lock()
	defer r.faultsMu.Unlock()
	var last, ended *fault
	var active []string
	for _, f := range r.faults {
		if f.start.After(at) {
			break
		}
		last = f
		if !f.kind.outage() {
			continue
		}
		if f.end.IsZero() || f.end.After(at) {
			active = append(active, fmt.Sprintf("#%d", f.n))
		} else if ended == nil || f.end.After(ended.end) {
			ended = f
		}
	}
	if last == nil {
		return "no fault before it"
	}
	s := fmt.Sprintf("after %s, %s into the run", last, r.since(last.start))
	if len(active) > 0 {
		s += fmt.Sprintf("; outages under way: %v", active)
	}
	if ended != nil && ended != last {
		s += fmt.Sprintf("; the last outage to end: %s, at %s", ended, r.since(ended.end))
	}
	return s
}

func (r *run) since(t time.Time) time.Duration { return t.Sub(r.start).Round(100 * time.Millisecond) }

// peerOutage is the lock the outages of fault kind's peer hold, or nil
// when kind is no outage of a peer.
func (r *run) peerOutage(kind faultKind) *sync.Mutex {
	switch kind {
	case faultRemote, faultBlackholeRemote:
		return &r.remoteOutage
	case faultGit, faultBlackholeGit:
		return &r.gitOutage
	}
	return nil
}

// execute runs one fault.
func (r *run) execute(ctx context.Context, f *fault) {
	rng := rand.New(rand.NewPCG(f.seed, uint64(f.n)))
	var err error
	var late string
	if mu := r.peerOutage(f.kind); mu != nil {
		// A peer's outages never overlap: one that starts while the last
		// is still restarting the peer (which can outlast its slot on a
		// loaded machine) waits for it, else it would kill the server
		// the other is starting.
		if !mu.TryLock() {
			begin := time.Now()
			mu.Lock()
			f.start = time.Now()
			late = fmt.Sprintf("started %v late, once the peer's last outage was over", f.start.Sub(begin).Round(100*time.Millisecond))
		}
		defer mu.Unlock()
	}
	defer func() {
		if late != "" {
			f.note = strings.TrimPrefix(f.note+"; "+late, "; ")
		}
	}()
	switch f.kind {
	case faultKill:
		err = r.op.kill9()
		time.Sleep(f.dur)
		err = errors.Join(err, r.op.start())
	case faultAPIServer, faultAPIServerKill:
		r.localDown.Store(true)
		begin := time.Now()
		if f.kind == faultAPIServerKill {
			err = env.KillAPIServer()
		} else {
			// A graceful stop (it stops listening at once, then drains):
			// envtest kills it after its stop timeout.
			if stopErr := env.StopAPIServer(); stopErr != nil {
				f.note = fmt.Sprintf("killed after a graceful stop of %v: %v", time.Since(begin).Round(time.Second), stopErr)
			} else {
				f.note = fmt.Sprintf("stopped in %v", time.Since(begin).Round(100*time.Millisecond))
			}
		}
		time.Sleep(f.dur - time.Since(begin))
		err = errors.Join(err, env.StartAPIServer())
		r.localDown.Store(false)
	case faultRemote:
		err = remoteEnv.KillAPIServer()
		time.Sleep(f.dur)
		err = errors.Join(err, remoteEnv.StartAPIServer())
	case faultGit:
		r.git.stop()
		time.Sleep(f.dur)
		err = r.git.start()
	case faultBlackholeRemote:
		err = r.blackholeRemote(f)
	case faultBlackholeGit:
		err = r.blackholeGit(f)
	case faultWebhookFlood:
		err = r.webhookFlood(ctx, f, rng)
	case faultEdit, faultDelete:
		err = r.handEdit(ctx, f, rng)
	case faultChurnSecret, faultChurnConfigMap:
		err = r.churnSource(ctx, f, rng)
	case faultChurnGit:
		err = r.churnGit(f, rng)
	case faultChurnNamespace:
		err = r.churnNamespace(ctx, f, rng)
	case faultPoison:
		err = r.poison(ctx, f, rng)
	case faultReplicaKill, faultReplicaKillNew, faultReplicaPause, faultReplicaTerm:
		err = r.replicaFault(f)
	}
	if err != nil {
		f.err = err
		r.t.Errorf("%s at %s: %v", f, r.since(f.start), err)
	}
}

// skip marks a fault that needs this cluster's API server while it is
// stopped.
func (r *run) skip(f *fault) bool {
	if r.localDown.Load() {
		f.skipped = "the API server is stopped"
		return true
	}
	return false
}

// handEdit changes a data value of a managed object of this cluster, as
// someone with kubectl edit would (the operator must correct it), or
// deletes it (the operator must recreate it).
func (r *run) handEdit(ctx context.Context, f *fault, rng *rand.Rand) error {
	if r.skip(f) {
		return nil
	}
	objs := r.f.localObjects()
	if len(objs) == 0 {
		f.skipped = "nothing to edit"
		return nil
	}
	k := objs[rng.IntN(len(objs))]
	f.note = k.String()
	var obj client.Object = &corev1.ConfigMap{}
	if k.Kind == "Secret" {
		obj = &corev1.Secret{}
	}
	key := types.NamespacedName{Namespace: k.Namespace, Name: k.Name}
	if f.kind == faultDelete {
		r.f.change(func() { r.f.deleted[k] = time.Now(); r.f.deletes[k]++ })
		obj.SetNamespace(k.Namespace)
		obj.SetName(k.Name)
		err := r.client.Delete(ctx, obj)
		if apierrors.IsNotFound(err) || r.localDown.Load() {
			f.note += " (already gone)"
			return nil
		}
		return err
	}
	if err := r.client.Get(ctx, key, obj); err != nil {
		if apierrors.IsNotFound(err) || r.localDown.Load() {
			f.skipped = "not there"
			return nil
		}
		return err
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		v := ""
		r.f.change(func() { v = r.f.newSecret(rng) })
		if o.Data == nil {
			o.Data = map[string][]byte{}
		}
		o.Data["token"] = []byte(v)
	case *corev1.ConfigMap:
		if o.Data == nil {
			o.Data = map[string]string{}
		}
		for key := range o.Data {
			o.Data[key] = "hand-" + randomString(rng, 6)
		}
	}
	err := r.client.Update(ctx, obj, client.FieldOwner(handManager))
	switch {
	case err == nil:
		r.f.change(func() { r.f.edits[k]++ })
	case apierrors.IsConflict(err) || apierrors.IsNotFound(err) || r.localDown.Load():
		// The operator (or another fault) wrote it first: no edit.
		f.skipped = "the write failed: " + skipReason(err)
	default:
		return err
	}
	return nil
}

// pickSync draws a ManifestSync of one of kinds.
func (r *run) pickSync(rng *rand.Rand, kinds ...syncKind) *msync {
	var pool []*msync
	for _, s := range r.f.syncs {
		if slices.Contains(kinds, s.kind) {
			pool = append(pool, s)
		}
	}
	return pool[rng.IntN(len(pool))]
}

// churnSource changes the source object of an object or selector sync (a
// new Secret token, sometimes a new port) or of a configmap sync.
func (r *run) churnSource(ctx context.Context, f *fault, rng *rand.Rand) error {
	if r.skip(f) {
		return nil
	}
	var s *msync
	if f.kind == faultChurnSecret {
		s = r.pickSync(rng, kindObject, kindSelector)
	} else {
		s = r.pickSync(rng, kindConfigMap)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f.note = s.String()
	var old map[string]string
	r.f.change(func() {
		old = s.data
		s.data = maps.Clone(old)
		s.changes++
		switch {
		case s.kind == kindConfigMap:
			s.data["value"] = "v-" + randomString(rng, 8)
			s.data["rev"] = strconv.Itoa(s.changes)
		default:
			s.data["token"] = r.f.newSecret(rng)
			if s.kind == kindObject && rng.IntN(2) == 0 {
				s.data["port"] = strconv.Itoa(8000 + rng.IntN(1000))
			}
		}
	})
	if err := r.f.writeSource(ctx, r.client, s); err != nil {
		r.f.change(func() { s.data = old })
		if r.localDown.Load() || apierrors.IsConflict(err) {
			f.skipped = "the write failed: " + skipReason(err)
			return nil
		}
		return err
	}
	return nil
}

// churnGit rewrites a git sync's ConfigMaps (one to three, new values)
// and pushes the commit.
func (r *run) churnGit(f *fault, rng *rand.Rand) error {
	s := r.pickSync(rng, kindGit)
	s.mu.Lock()
	defer s.mu.Unlock()
	var files map[string]string
	n := 1 + rng.IntN(3)
	r.f.change(func() {
		s.changes++
		s.files = map[string]string{}
		for i := range n {
			s.files[fmt.Sprintf("%s-%d", s.name, i)] = "v-" + randomString(rng, 8)
		}
		files = r.f.gitFiles()
	})
	f.note = fmt.Sprintf("%s, %d ConfigMaps", s, n)
	return r.git.commit(files)
}

// churnNamespace gives a selectable namespace another group (or none),
// so that selector syncs copy into it or prune from it.
func (r *run) churnNamespace(ctx context.Context, f *fault, rng *rand.Rand) error {
	if r.skip(f) {
		return nil
	}
	ns := selectNS(rng.IntN(selectables))
	groups := []string{"a", "b", ""}
	var old, now string
	r.f.change(func() {
		old = r.f.nsGroups[ns]
		now = groups[rng.IntN(len(groups))]
		for now == old {
			now = groups[rng.IntN(len(groups))]
		}
		r.f.nsGroups[ns] = now
		for _, s := range r.f.syncs {
			if s.kind == kindSelector && (s.group == old || s.group == now) {
				s.changes++
			}
		}
	})
	f.note = fmt.Sprintf("namespace %s: group %q -> %q", ns, old, now)
	err := r.setGroup(ctx, ns, now)
	if err != nil {
		r.f.change(func() { r.f.nsGroups[ns] = old })
		if r.localDown.Load() {
			f.skipped = "the API server is stopped"
			return nil
		}
	}
	return err
}

func (r *run) setGroup(ctx context.Context, ns, group string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, groupLabel)
	if group != "" {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, groupLabel, group)
	}
	obj := &corev1.Namespace{}
	obj.Name = ns
	return r.client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// poison gives an object sync's source a port that is not a number (a
// Secret value, like every value of a Secret), so that its transform
// fails quoting it, and restores it after f.dur: the last good state must
// stay meanwhile, and no log, event or status may show the value.
func (r *run) poison(ctx context.Context, f *fault, rng *rand.Rand) error {
	if r.skip(f) {
		return nil
	}
	s := r.pickSync(rng, kindObject)
	s.mu.Lock()
	r.f.mu.Lock()
	poisoned := s.poison != ""
	r.f.mu.Unlock()
	if poisoned {
		s.mu.Unlock()
		f.note, f.skipped = s.String(), "poisoned already"
		return nil
	}
	f.note = s.String()
	r.f.change(func() { s.poison = "x" + r.f.newSecret(rng); s.changes++ })
	err := r.f.writeSource(ctx, r.client, s)
	s.mu.Unlock()
	if err != nil {
		r.f.change(func() { s.poison = "" })
		if r.localDown.Load() || apierrors.IsConflict(err) {
			f.skipped = "the write failed: " + skipReason(err)
			return nil
		}
		return err
	}
	time.Sleep(f.dur)
	// The good value must come back, whatever else happens meanwhile.
	var bad string
	r.f.change(func() { bad = s.poison; s.changes++ })
	deadline := time.Now().Add(2 * time.Minute)
	for {
		s.mu.Lock()
		r.f.change(func() { s.poison = "" })
		err = r.f.writeSource(ctx, r.client, s)
		if err != nil {
			r.f.change(func() { s.poison = bad })
		}
		s.mu.Unlock()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(time.Second)
	}
}
