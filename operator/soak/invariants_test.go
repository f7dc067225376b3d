package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/controller"
)

type invariant int

const (
	invLost invariant = iota
	invForeign
	invSecrets
	invConverge
	invWriteWar
	invStuck
	numInvariants
)

func (i invariant) String() string {
	if i >= numInvariants {
		return shardInvNames[i-numInvariants]
	}
	return [...]string{
		"no managed object lost or duplicated",
		"no foreign object modified",
		"no Secret value in a log, event or status",
		"every ManifestSync converges after the last fault",
		"no write war",
		"every faulty ManifestSync reports why",
	}[i]
}

// The limits of the write-war check.
const (
	// warWindow and warWrites: more writes of one object within the
	// window are a write war, whatever caused them.
	warWindow = 10 * time.Second
	warWrites = 10
	// writeSlack is what an object may be written beyond its budget (a
	// kill -9 between two writes of one apply, say).
	writeSlack = 2
	// stableFor: an object desired this long may not be deleted but by
	// the test.
	stableFor = 20 * time.Second
)

type violation struct {
	inv    invariant
	at     time.Time
	what   string
	detail string
	after  string // the fault that preceded it
}

// monitor checks the invariants: continuously from watches of both
// clusters, the operator's log and the ManifestSyncs' status, and at
// checkpoints, once the fleet has converged.
type monitor struct {
	r *run

	mu         sync.Mutex
	violations []violation
	seen       map[string]bool // violations reported already
	checks     map[invariant]int
	writes     map[objKey][]time.Time // every write of a managed object
	foreign    map[objKey]string      // resourceVersion of each foreign object
	logOffset  map[string]int64       // of each operator log, read so far
	logLines   int
	events     int
	statuses   int
	slowest    []time.Duration // per checkpoint: the last ManifestSync to converge
	allTimes   []time.Duration // of every ManifestSync at every checkpoint after faults
}

func newMonitor(r *run) *monitor {
	return &monitor{r: r, seen: map[string]bool{}, writes: map[objKey][]time.Time{}, foreign: map[objKey]string{}, logOffset: map[string]int64{}, checks: map[invariant]int{}}
}

// violate records a broken invariant once per what and detail.
func (m *monitor) violate(inv invariant, at time.Time, what, detail string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := fmt.Sprint(inv, what, detail)
	if m.seen[key] {
		return
	}
	m.seen[key] = true
	m.violations = append(m.violations, violation{inv: inv, at: at, what: what, detail: detail, after: m.r.precedingFault(at)})
}

func (m *monitor) count(inv invariant, n int) {
	m.mu.Lock()
	m.checks[inv] += n
	m.mu.Unlock()
}

// watch starts the informers of one cluster: managed objects, foreign
// objects and (of this cluster) events.
func (m *monitor) watch(ctx context.Context, cluster string, cfg *rest.Config) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	bySelector := func(sel string) informers.SharedInformerFactory {
		return informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	}
	owned, foreign := bySelector(controller.OwnerLabel), bySelector(foreignLabel)
	var synced []cache.InformerSynced
	for _, inf := range []cache.SharedIndexInformer{owned.Core().V1().ConfigMaps().Informer(), owned.Core().V1().Secrets().Informer()} {
		if _, err := inf.AddEventHandler(m.ownedHandler(cluster)); err != nil {
			return err
		}
		synced = append(synced, inf.HasSynced)
	}
	for _, inf := range []cache.SharedIndexInformer{foreign.Core().V1().ConfigMaps().Informer(), foreign.Core().V1().Secrets().Informer()} {
		if _, err := inf.AddEventHandler(m.foreignHandler(cluster)); err != nil {
			return err
		}
		synced = append(synced, inf.HasSynced)
	}
	owned.Start(ctx.Done())
	foreign.Start(ctx.Done())
	if cluster == local {
		all := informers.NewSharedInformerFactory(cs, 0)
		inf := all.Events().V1().Events().Informer()
		scan := func(obj any) {
			if e, ok := obj.(*eventsv1.Event); ok {
				m.scanEvent(e)
			}
		}
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: scan, UpdateFunc: func(_, obj any) { scan(obj) }}); err != nil {
			return err
		}
		synced = append(synced, inf.HasSynced)
		all.Start(ctx.Done())
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("the watches of cluster %q did not sync", cluster)
	}
	return nil
}

func keyOf(cluster string, obj any) (objKey, metav1.Object, bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	meta, err := apimeta.Accessor(obj)
	if err != nil {
		return objKey{}, nil, false
	}
	kind := "ConfigMap"
	if _, ok := obj.(*corev1.Secret); ok {
		kind = "Secret"
	}
	return objKey{cluster, kind, meta.GetNamespace(), meta.GetName()}, meta, true
}

func (m *monitor) ownedHandler(cluster string) cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { m.ownedWrite(cluster, obj) },
		UpdateFunc: func(old, obj any) {
			o, _ := apimeta.Accessor(old)
			n, _ := apimeta.Accessor(obj)
			if o != nil && n != nil && o.GetResourceVersion() != n.GetResourceVersion() {
				m.ownedWrite(cluster, obj)
			}
		},
		DeleteFunc: func(obj any) { m.ownedDelete(cluster, obj) },
	}
}

// ownedWrite counts a write of a managed object, and checks that the
// object is one its ManifestSync may make.
func (m *monitor) ownedWrite(cluster string, obj any) {
	k, meta, ok := keyOf(cluster, obj)
	if !ok {
		return
	}
	s := m.r.f.owned(meta)
	if s == nil {
		return // another owner's: a foreign object
	}
	now := time.Now()
	m.r.f.mu.Lock()
	ever := m.r.f.ever[k]
	m.r.f.mu.Unlock()
	m.count(invLost, 1)
	if ever != s {
		m.violate(invLost, now, k.String(), fmt.Sprintf("carries the owner label of %s but is none of its desired objects (duplicated into a namespace or cluster it never targets)", s))
	}
	m.mu.Lock()
	m.writes[k] = append(m.writes[k], now)
	w := m.writes[k]
	n := len(w) - firstNotBefore(w, now.Add(-warWindow))
	m.checks[invWriteWar]++
	m.mu.Unlock()
	if n > warWrites {
		m.violate(invWriteWar, now, k.String(), fmt.Sprintf("written more than %d times within %v (owned by %s)", warWrites, warWindow, s))
	}
}

// firstNotBefore returns the index of the first time in w (ascending) not before t.
func firstNotBefore(w []time.Time, t time.Time) int {
	i, _ := slices.BinarySearchFunc(w, t, func(a, b time.Time) int { return a.Compare(b) })
	return i
}

// ownedDelete checks a deletion of a managed object: the operator may
// delete what is no longer desired, never what has been desired for a
// while, unless the test deleted it by hand.
func (m *monitor) ownedDelete(cluster string, obj any) {
	k, meta, ok := keyOf(cluster, obj)
	if !ok || m.r.f.owned(meta) == nil {
		return
	}
	now := time.Now()
	f := m.r.f
	f.mu.Lock()
	since, desired := f.desiredSince[k]
	byHand := now.Sub(f.deleted[k]) < time.Minute
	s := f.ever[k]
	f.mu.Unlock()
	m.count(invLost, 1)
	if desired && !byHand && now.Sub(since) > stableFor {
		m.violate(invLost, now, k.String(), fmt.Sprintf("deleted while %s has desired it for %v", s, now.Sub(since).Round(time.Second)))
	}
}

func (m *monitor) foreignHandler(cluster string) cache.ResourceEventHandler {
	check := func(obj any, deleted bool) {
		k, meta, ok := keyOf(cluster, obj)
		if !ok {
			return
		}
		m.mu.Lock()
		rv, known := m.foreign[k]
		m.checks[invForeign]++
		m.mu.Unlock()
		switch {
		case !known:
		case deleted:
			m.violate(invForeign, time.Now(), k.String(), "deleted")
		case rv != meta.GetResourceVersion():
			m.violate(invForeign, time.Now(), k.String(), fmt.Sprintf("modified (resourceVersion %s -> %s, field managers %v)", rv, meta.GetResourceVersion(), managers(meta)))
		}
	}
	return cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { check(obj, false) },
		DeleteFunc: func(obj any) { check(obj, true) },
	}
}

func managers(meta metav1.Object) []string {
	var out []string
	for _, e := range meta.GetManagedFields() {
		out = append(out, e.Manager+"/"+string(e.Operation))
	}
	return out
}

// checkForeign reads every foreign object: each must be as it was made.
func (m *monitor) checkForeign(ctx context.Context) error {
	m.mu.Lock()
	want := maps.Clone(m.foreign)
	m.mu.Unlock()
	for k, rv := range want {
		c := m.r.clientOf(k.Cluster)
		var obj client.Object = &corev1.ConfigMap{}
		if k.Kind == "Secret" {
			obj = &corev1.Secret{}
		}
		err := c.Get(ctx, client.ObjectKey{Namespace: k.Namespace, Name: k.Name}, obj)
		m.count(invForeign, 1)
		switch {
		case client.IgnoreNotFound(err) != nil:
			return err
		case err != nil:
			m.violate(invForeign, time.Now(), k.String(), "deleted")
		case obj.GetResourceVersion() != rv:
			m.violate(invForeign, time.Now(), k.String(), fmt.Sprintf("modified (resourceVersion %s -> %s, field managers %v)", rv, obj.GetResourceVersion(), managers(obj)))
		}
	}
	return nil
}

// scan looks for every Secret value, raw and base64, in text.
func (m *monitor) scan(at time.Time, place, text string) {
	for _, n := range m.r.f.needles() {
		if i := strings.Index(text, n.text); i >= 0 {
			lo, hi := max(0, i-60), min(len(text), i+len(n.text)+20)
			snippet := strings.ReplaceAll(text[lo:hi], n.text, "<"+masked(n.secret)+">")
			m.violate(invSecrets, at, place, fmt.Sprintf("holds the Secret value %s (%s): …%s…", masked(n.secret), n.form, m.redact(snippet)))
		}
	}
}

// redact masks every Secret value in s, for the test's own messages.
func (m *monitor) redact(s string) string {
	for _, n := range m.r.f.needles() {
		s = strings.ReplaceAll(s, n.text, masked(n.secret))
	}
	return s
}

func (m *monitor) scanEvent(e *eventsv1.Event) {
	raw, _ := json.Marshal(e)
	m.mu.Lock()
	m.events++
	m.checks[invSecrets]++
	m.mu.Unlock()
	m.scan(time.Now(), fmt.Sprintf("event %s/%s (%s %s about %s %s)", e.Namespace, e.Name, e.Type, e.Reason, e.Regarding.Kind, e.Regarding.Name), string(raw))
}

// scanLog scans the lines the operators logged since the last call.
func (m *monitor) scanLog() error {
	for _, path := range m.r.logPaths() {
		if err := m.scanLogFile(path); err != nil {
			return err
		}
	}
	return nil
}

func (m *monitor) scanLogFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	m.mu.Lock()
	off := m.logOffset[path]
	m.mu.Unlock()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return err
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	end := strings.LastIndexByte(string(raw), '\n') + 1
	lines := strings.Split(string(raw[:end]), "\n")
	m.mu.Lock()
	m.logOffset[path] += int64(end)
	first := m.logLines
	m.logLines += len(lines) - 1
	m.checks[invSecrets] += len(lines) - 1
	m.mu.Unlock()
	for i, line := range lines[:len(lines)-1] {
		m.scan(time.Now(), fmt.Sprintf("operator log line %d", first+i+1), line)
	}
	return nil
}

// scanStatuses scans every ManifestSync's status.
func (m *monitor) scanStatuses(ctx context.Context) error {
	var list v1alpha1.ManifestSyncList
	if err := m.r.client.List(ctx, &list); err != nil {
		return err
	}
	for _, ms := range list.Items {
		raw, _ := json.Marshal(ms.Status)
		m.scan(time.Now(), fmt.Sprintf("status of ManifestSync %s/%s", ms.Namespace, ms.Name), string(raw))
	}
	m.mu.Lock()
	m.statuses += len(list.Items)
	m.checks[invSecrets] += len(list.Items)
	m.mu.Unlock()
	return nil
}

// scanAllEvents lists every event of the clusters and scans it.
func (m *monitor) scanAllEvents(ctx context.Context) error {
	for _, cluster := range m.r.clusters() {
		c := m.r.clientOf(cluster)
		var list eventsv1.EventList
		if err := c.List(ctx, &list); err != nil {
			return err
		}
		for i := range list.Items {
			m.scanEvent(&list.Items[i])
		}
	}
	return nil
}

// follow scans the log every second and the statuses every two, until
// ctx ends; reads that fail (an API server is stopped) are retried at
// the next tick.
func (m *monitor) follow(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_ = m.scanLog()
		if n%2 == 0 && !m.r.localDown.Load() {
			_ = m.scanStatuses(ctx)
		}
	}
}

// checkWrites compares each managed object's writes with its budget: its
// creation, one per change of its ManifestSync's sources, two per hand
// edit (the edit and the correction), one per hand deletion (the
// re-creation), one per move of its ManifestSync to another replica
// (which labels it its own; shards_test.go), and writeSlack.
func (m *monitor) checkWrites() {
	f := m.r.f
	f.mu.Lock()
	m.mu.Lock()
	type over struct {
		k    objKey
		text string
	}
	var overs []over
	for k, w := range m.writes {
		s := f.ever[k]
		if s == nil {
			continue
		}
		budget := 1 + s.changes + 2*f.edits[k] + f.deletes[k] + s.moves + writeSlack
		m.checks[invWriteWar]++
		if len(w) > budget {
			overs = append(overs, over{k, fmt.Sprintf("written %d times; its budget is %d (1 creation + %d source changes of %s + 2×%d hand edits + %d hand deletions + %d moves + %d)",
				len(w), budget, s.changes, s, f.edits[k], f.deletes[k], s.moves, writeSlack)})
		}
	}
	m.mu.Unlock()
	f.mu.Unlock()
	for _, o := range overs {
		m.violate(invWriteWar, time.Now(), o.k.String(), o.text)
	}
}

// problem is why a ManifestSync has not converged.
type problem struct {
	inv  invariant
	text string
}

// observe compares both clusters with the model: for each ManifestSync,
// what is missing, extra or stale, and whether it is Ready.
func (m *monitor) observe(ctx context.Context) (map[*msync][]problem, error) {
	type liveObj struct {
		owner string
		data  map[string]string
	}
	live := map[objKey]liveObj{}
	for _, cluster := range m.r.clusters() {
		c := m.r.clientOf(cluster)
		var cms corev1.ConfigMapList
		if err := c.List(ctx, &cms, client.HasLabels{controller.OwnerLabel}); err != nil {
			return nil, err
		}
		for _, o := range cms.Items {
			live[objKey{cluster, "ConfigMap", o.Namespace, o.Name}] = liveObj{o.Labels[controller.OwnerLabel], o.Data}
		}
		var secrets corev1.SecretList
		if err := c.List(ctx, &secrets, client.HasLabels{controller.OwnerLabel}); err != nil {
			return nil, err
		}
		for _, o := range secrets.Items {
			data := map[string]string{}
			for k, v := range o.Data {
				data[k] = string(v)
			}
			live[objKey{cluster, "Secret", o.Namespace, o.Name}] = liveObj{o.Labels[controller.OwnerLabel], data}
		}
	}
	var list v1alpha1.ManifestSyncList
	if err := m.r.client.List(ctx, &list); err != nil {
		return nil, err
	}
	byName := map[string]*v1alpha1.ManifestSync{}
	for i := range list.Items {
		byName[list.Items[i].Namespace+"."+list.Items[i].Name] = &list.Items[i]
	}

	f := m.r.f
	f.mu.Lock()
	desired := map[*msync]map[objKey]map[string]string{}
	for _, s := range f.syncs {
		desired[s] = f.desired(s)
	}
	f.mu.Unlock()

	out := map[*msync][]problem{}
	for _, s := range f.syncs {
		var probs []problem
		add := func(inv invariant, format string, args ...any) {
			probs = append(probs, problem{inv, fmt.Sprintf(format, args...)})
		}
		want := desired[s]
		for k, data := range want {
			got, ok := live[k]
			switch {
			case !ok:
				add(invLost, "%s is missing", k)
			case got.owner != s.owner():
				add(invLost, "%s is owned by %q", k, got.owner)
			case !maps.Equal(got.data, data):
				add(invConverge, "%s has stale data: %s", k, m.redact(diff(got.data, data)))
			}
		}
		for k, o := range live {
			if o.owner == s.owner() && want[k] == nil {
				add(invLost, "%s carries its owner label but is not desired (not pruned, or duplicated)", k)
			}
		}
		ms := byName[s.owner()]
		if ms == nil {
			add(invLost, "the ManifestSync is gone")
			out[s] = probs
			continue
		}
		if c := apimeta.FindStatusCondition(ms.Status.Conditions, v1alpha1.ConditionReady); c == nil {
			add(invConverge, "no Ready condition")
		} else if c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonSynced || c.ObservedGeneration != ms.Generation {
			add(invConverge, "Ready is %s (%s) for generation %d of %d: %s", c.Status, c.Reason, c.ObservedGeneration, ms.Generation, m.redact(c.Message))
		}
		inventory := map[string]bool{}
		for _, e := range ms.Status.Inventory {
			id := e.ID
			if e.Cluster != "" {
				id += " in " + e.Cluster
			}
			if inventory[id] {
				add(invLost, "status.inventory lists %s twice", id)
			}
			inventory[id] = true
		}
		for k := range want {
			id := k.inventoryID()
			if k.Cluster == remote {
				id += " in remote/value"
			}
			if !inventory[id] {
				add(invLost, "status.inventory lacks %s", k)
			}
			delete(inventory, id)
		}
		for id := range inventory {
			add(invLost, "status.inventory lists %s, which is not desired", id)
		}
		slices.SortFunc(probs, func(a, b problem) int { return strings.Compare(a.text, b.text) })
		out[s] = probs
	}
	return out, nil
}

func diff(got, want map[string]string) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] {
			parts = append(parts, fmt.Sprintf("%s is %q, want %q", k, got[k], want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			parts = append(parts, fmt.Sprintf("%s is extra", k))
		}
	}
	return strings.Join(parts, ", ")
}

// converge waits until every ManifestSync matches the model and is Ready,
// measuring from since (the end of the last fault), then checks once more
// 2 s later that each stayed so. A ManifestSync slower than the limit, or
// not converged at all after the longer of twice the limit and the limit
// plus a minute, breaks the convergence invariant, and its remaining
// problems the invariants they belong to.
func (m *monitor) converge(ctx context.Context, label string, since time.Time, limit time.Duration, record bool) {
	giveUp := max(2*limit, limit+time.Minute)
	convergedAt := map[*msync]time.Time{}
	var last map[*msync][]problem
	syncs := m.r.f.syncs
	for {
		probs, err := m.observe(ctx)
		now := time.Now()
		if err == nil {
			last = probs
			for _, s := range syncs {
				if len(probs[s]) > 0 {
					delete(convergedAt, s)
				} else if _, ok := convergedAt[s]; !ok {
					convergedAt[s] = now
				}
			}
		}
		if len(convergedAt) == len(syncs) {
			time.Sleep(2 * time.Second)
			if probs, err := m.observe(ctx); err == nil {
				last = probs
				for _, s := range syncs {
					if len(probs[s]) > 0 {
						delete(convergedAt, s)
					}
				}
			}
			if len(convergedAt) == len(syncs) {
				break
			}
		}
		if now.Sub(since) > giveUp || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	var slowest time.Duration
	var slow []string // slower than the 10 s rule, whatever the limit
	for _, s := range syncs {
		m.count(invConverge, 1)
		at, ok := convergedAt[s]
		took := at.Sub(since)
		if !ok {
			took = time.Since(since)
			var texts []string
			for _, p := range last[s] {
				texts = append(texts, p.text)
				if p.inv != invConverge {
					m.violate(p.inv, time.Now(), s.String(), label+": "+p.text)
				}
			}
			m.violate(invConverge, since, s.String(), fmt.Sprintf("%s: not converged %v after the last fault: %s", label, took.Round(100*time.Millisecond), strings.Join(texts, "; ")))
		} else if took > limit {
			m.violate(invConverge, since, s.String(), fmt.Sprintf("%s: converged %v after the last fault, limit %v", label, took.Round(100*time.Millisecond), limit))
		}
		if took > convergeRule {
			slow = append(slow, fmt.Sprintf("%s/%s %v", s.ns, s.name, took.Round(100*time.Millisecond)))
		}
		slowest = max(slowest, took)
		if record {
			m.mu.Lock()
			m.allTimes = append(m.allTimes, took)
			m.mu.Unlock()
		}
	}
	if record {
		m.mu.Lock()
		m.slowest = append(m.slowest, slowest)
		m.mu.Unlock()
	}
	m.r.t.Logf("%s: %d/%d ManifestSyncs converged; the slowest %v after the last fault (limit %v)%s",
		label, len(convergedAt), len(syncs), slowest.Round(100*time.Millisecond), limit, slower(slow))
}

func slower(slow []string) string {
	if len(slow) == 0 {
		return ""
	}
	return fmt.Sprintf("; slower than %v: %s", convergeRule, strings.Join(slow, ", "))
}
