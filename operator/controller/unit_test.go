package controller

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/health"
)

func TestInventoryIDs(t *testing.T) {
	for _, obj := range []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "web-dev"}}},
		{Object: map[string]any{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": map[string]any{"name": "view.x"}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "tls", "namespace": "a"}}},
	} {
		it := itemOf(obj, "dev")
		e := it.entry()
		back, err := parseInventory(withInventory(e))
		if err != nil || len(back) != 1 || back[0] != it || back[0].gvk() != obj.GroupVersionKind() {
			t.Errorf("%s: round trip gave %+v", e.ID, back)
		}
	}
	if id := v1alpha1.IDOf(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "web-dev"}}}).InventoryID(); id != "web-dev_web_apps_Deployment" {
		t.Errorf("id %q", id)
	}
	if got, err := parseInventory(withInventory(v1alpha1.InventoryEntry{ID: "bad", Version: "v1"}, v1alpha1.InventoryEntry{ID: "a_b__Secret"})); err != nil || len(got) != 0 {
		t.Errorf("malformed entries parsed: %+v", got)
	}
}

// The inventory is written in the order of its targets, clusters and
// inventory ids (as strings: "a-b_x" before "a_x"), once per object, and
// reads back through the stream it is written to, gzipped or not.
func TestWriteInventoryOrder(t *testing.T) {
	ids := []v1alpha1.ObjectID{
		{Namespace: "a", Name: "x", Kind: "Secret"},
		{Namespace: "a-b", Name: "x", Kind: "Secret"},
		{Namespace: "a", Name: "x", Kind: "SecretX"},
		{Namespace: "a", Name: "x", Group: "apps", Kind: "Deployment"},
		{Name: "a", Kind: "Namespace"},
		{Namespace: "a", Name: "x.y", Kind: "Secret"},
	}
	for _, a := range append(ids, v1alpha1.ObjectID{Namespace: "ab", Kind: "Secret"}) {
		for _, b := range append(ids, v1alpha1.ObjectID{Namespace: "a", Name: "x_"}) {
			if got, want := compareInventoryIDs(a, b), strings.Compare(a.InventoryID(), b.InventoryID()); got != want {
				t.Errorf("compare %q, %q: %d, want %d", a.InventoryID(), b.InventoryID(), got, want)
			}
		}
	}
	var items []inventoryItem
	for _, target := range []string{"b", "a"} {
		for _, cluster := range []string{"remote/kubeconfig", ""} {
			for _, id := range slices.Backward(ids) {
				items = append(items, inventoryItem{id: id, version: "v1", target: target, cluster: cluster, fields: 0xf})
			}
		}
	}
	items = append(items, items[3]) // a duplicate
	var want []v1alpha1.InventoryEntry
	for _, it := range items[:len(items)-1] {
		want = append(want, it.entry())
	}
	slices.SortFunc(want, func(a, b v1alpha1.InventoryEntry) int {
		return cmp.Or(strings.Compare(a.Target, b.Target), strings.Compare(a.Cluster, b.Cluster), strings.Compare(a.ID, b.ID))
	})
	for _, threshold := range []int{1 << 20, 10} {
		ms := &v1alpha1.ManifestSync{}
		ptrs := make([]*inventoryItem, len(items))
		for i := range items {
			ptrs[i] = &items[i]
		}
		if err := writeInventory(&ms.Status, ptrs, threshold); err != nil {
			t.Fatal(err)
		}
		if gz := ms.Status.InventoryGzip != nil; gz != (threshold == 10) {
			t.Errorf("threshold %d: gzipped %v", threshold, gz)
		}
		got, err := ms.InventoryEntries()
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("threshold %d: %v\n%v\nwant\n%v", threshold, err, got, want)
		}
		var streamed []inventoryItem
		for it := range inventoryStream(ms) {
			streamed = append(streamed, it)
		}
		if len(streamed) != len(want) || streamed[0].entry() != want[0] || streamed[len(want)-1].entry() != want[len(want)-1] {
			t.Errorf("threshold %d: streamed %d items, want %d", threshold, len(streamed), len(want))
		}
	}
}

// The gzipped inventory our last status write left is known sound; any
// other is read through.
func TestWroteInventory(t *testing.T) {
	ms := &v1alpha1.ManifestSync{}
	ms.UID = "u1"
	if err := ms.Status.SetInventory([]v1alpha1.InventoryEntry{{ID: "a_b__Secret", Version: "v1"}}, 0); err != nil || ms.Status.InventoryGzip == nil {
		t.Fatalf("gzipped inventory: %v", err)
	}
	st := &syncState{}
	if st.wroteInventory(ms) {
		t.Error("known sound before any write")
	}
	st.wrote(ms)
	now := ms.DeepCopy()
	if !st.wroteInventory(now) {
		t.Error("the inventory we wrote is read through again")
	}
	now.Status.InventoryGzip[len(now.Status.InventoryGzip)-1] ^= 1
	other := ms.DeepCopy()
	other.UID = "u2"
	plain := ms.DeepCopy()
	plain.Status.Inventory, plain.Status.InventoryGzip = []v1alpha1.InventoryEntry{{ID: "a_b__Secret", Version: "v1"}}, nil
	for name, m := range map[string]*v1alpha1.ManifestSync{"changed": now, "another object": other, "plain": plain} {
		if st.wroteInventory(m) {
			t.Errorf("%s: known sound", name)
		}
	}
}

func TestHistoryKeepsTen(t *testing.T) {
	ms := &v1alpha1.ManifestSync{}
	for i := range 12 {
		res := &engine.Result{Revision: fmt.Sprintf("sha256:%02d", i)}
		recordEvaluation(ms, res, "out", v1alpha1.ReasonSynced, metav1.Now())
		recordEvaluation(ms, res, "out", v1alpha1.ReasonSynced, metav1.Now()) // no new entry
	}
	h := ms.Status.History
	if len(h) != historyLimit || h[0].Revision != "sha256:11" || h[9].Revision != "sha256:02" {
		t.Fatalf("history %+v", h)
	}
	recordEvaluation(ms, &engine.Result{Revision: "sha256:11"}, "out", v1alpha1.ReasonApplyFailed, metav1.Now())
	if len(ms.Status.History) != historyLimit || ms.Status.History[0].Result != v1alpha1.ReasonApplyFailed {
		t.Errorf("a new result of the same revision: %+v", ms.Status.History[0])
	}
}

func TestConditions(t *testing.T) {
	for _, tc := range []struct {
		reason                   string
		ready, reconcile, stalls metav1.ConditionStatus
	}{
		{v1alpha1.ReasonSynced, "True", "False", "False"},
		{v1alpha1.ReasonSourceFailed, "False", "True", "False"},
		{v1alpha1.ReasonApplyFailed, "False", "True", "False"},
		{v1alpha1.ReasonEvalFailed, "False", "False", "True"},
		{v1alpha1.ReasonValidationFailed, "False", "False", "True"},
		{v1alpha1.ReasonConflict, "False", "False", "True"},
	} {
		ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
		setConditions(ms, tc.reason, strings.Repeat("x", 2000))
		got := []metav1.ConditionStatus{
			condition(ms, v1alpha1.ConditionReady).Status,
			condition(ms, v1alpha1.ConditionReconciling).Status,
			condition(ms, v1alpha1.ConditionStalled).Status,
		}
		if got[0] != tc.ready || got[1] != tc.reconcile || got[2] != tc.stalls {
			t.Errorf("%s: Ready, Reconciling, Stalled = %v", tc.reason, got)
		}
		if c := condition(ms, v1alpha1.ConditionReady); len(c.Message) > maxMessage || c.ObservedGeneration != 3 || ms.Status.ObservedGeneration != 3 {
			t.Errorf("%s: %d-byte message, generation %d", tc.reason, len(c.Message), c.ObservedGeneration)
		}
	}
}

func TestAllowedNamespaces(t *testing.T) {
	ms := &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: "web"}}
	ref := objectRef{namespace: "platform", name: "tls"}
	for _, tc := range []struct {
		annotation string
		ok         bool
	}{
		{"", false},
		{"other", false},
		{"other, web", true},
		{"*", true},
		{"webx", false},
	} {
		err := allowed(ms, ref, map[string]string{AllowNamespacesAnnotation: tc.annotation})
		if (err == nil) != tc.ok {
			t.Errorf("%q: %v", tc.annotation, err)
		}
	}
	if err := allowed(ms, objectRef{namespace: "web"}, nil); err != nil {
		t.Errorf("own namespace: %v", err)
	}
}

// The write guard refuses one write more than its limit of one desired
// state within its window, and clears by itself: for a new desired state
// at once, and as the window passes.
func TestWriteGuard(t *testing.T) {
	now := time.Unix(0, 0)
	g := newWriteGuard(3, time.Minute)
	g.now = func() time.Time { return now }
	k := writeKey{writer: "home.sync/t0", id: v1alpha1.ObjectID{Namespace: "web", Name: "cfg", Kind: "ConfigMap"}}
	for i := range 3 {
		if err := g.allow(k, "d1"); err != nil {
			t.Fatalf("write %d refused: %v", i+1, err)
		}
		g.wrote(k, "d1")
		now = now.Add(10 * time.Second)
	}
	err := g.allow(k, "d1")
	var war *writeWarError
	if !errors.As(err, &war) || !strings.Contains(err.Error(), "ConfigMap web/cfg: write war") {
		t.Fatalf("the 4th write within the window: %v", err)
	}
	if !war.allowed.Equal(time.Unix(60, 0)) {
		t.Errorf("allowed again at %v, want when the first write leaves the window", war.allowed)
	}
	if len(g.logs) != 1 || len(g.later[g.hash(k)]) != 2 {
		t.Errorf("the guard holds %d objects, %d later writes of the one at war; want 1 and 2", len(g.logs), len(g.later[g.hash(k)]))
	}
	// Another writer, or another object, is not at war.
	if err := g.allow(writeKey{writer: "home.other/t0", id: k.id}, "d1"); err != nil {
		t.Errorf("another writer: %v", err)
	}
	// A new desired state is written at once.
	if err := g.allow(k, "d2"); err != nil {
		t.Errorf("a new desired state: %v", err)
	}
	// The first write leaves the window 60s after it was made.
	now = time.Unix(59, 0)
	if err := g.allow(k, "d1"); err == nil {
		t.Error("allowed before the first write left the window")
	}
	now = time.Unix(60, 0)
	if err := g.allow(k, "d1"); err != nil {
		t.Errorf("still refused after the window: %v", err)
	}
	// Objects not written within the window are forgotten.
	now = now.Add(time.Hour)
	g.wrote(writeKey{writer: "home.sync/t0", id: v1alpha1.ObjectID{Name: "other", Kind: "Namespace"}}, "d")
	if len(g.logs) != 1 || len(g.later) != 0 {
		t.Errorf("the guard holds %d objects (%d with later writes), want 1 written once", len(g.logs), len(g.later))
	}
	var nilGuard *writeGuard
	if err := nilGuard.allow(k, "d1"); err != nil {
		t.Errorf("nil guard: %v", err)
	}
}

// A failure that ends by itself is retried with a backoff that stops at
// TransientRetryMax, not the controller's minutes, and starts again after
// a success.
func TestRetrySoonBackoff(t *testing.T) {
	r := &Reconciler{Options: Options{RetryMin: time.Second, TransientRetryMax: 5 * time.Second}}
	st := &syncState{}
	var got []time.Duration
	for range 6 {
		res, err := r.retrySoon(context.Background(), st, errors.New("git server unreachable"))
		if err != nil {
			t.Fatalf("retrySoon returned %v: the controller's backoff would take over", err)
		}
		got = append(got, res.RequeueAfter)
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second, 5 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("retries after %v, want %v", got, want)
	}
	if def := (Options{}).transientRetryMax(); def != 5*time.Second {
		t.Errorf("default TransientRetryMax %v, want 5s", def)
	}
}

// The health verdict: Failed objects fail at once, others once
// spec.timeout has passed; messages name five objects and count the rest;
// the recheck is the first pending target's deadline.
func TestHealthVerdict(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	outcome := func(since time.Time, statuses ...health.Status) *targetOutcome {
		o := &targetOutcome{cluster: &cluster{}, record: &targetRecord{since: since}}
		for i, s := range statuses {
			o.health = append(o.health, objectHealth{id: v1alpha1.ObjectID{Kind: "Deployment", Namespace: "web", Name: fmt.Sprint("d", i)},
				Result: health.Result{Status: s, Message: "m" + fmt.Sprint(i)}})
		}
		return o
	}
	const timeout = time.Minute

	v := &healthVerdict{}
	if h := v.add(outcome(start, health.Current, health.InProgress), timeout, start.Add(10*time.Second)); h != v1alpha1.HealthProgressing {
		t.Errorf("target health %s, want Progressing", h)
	}
	if h := v.add(outcome(start.Add(-30*time.Second), health.Unknown), timeout, start.Add(10*time.Second)); h != v1alpha1.HealthUnknown {
		t.Errorf("target health %s, want Unknown", h)
	}
	if !v.recheck.Equal(start.Add(30 * time.Second)) {
		t.Errorf("recheck at %s, want the earliest deadline", v.recheck)
	}
	status, reason, msg := v.condition()
	if status != metav1.ConditionFalse || reason != v1alpha1.ReasonProgressing || msg != "waiting for Deployment web/d1, Deployment web/d0" {
		t.Errorf("condition %s %s %q", status, reason, msg)
	}

	v = &healthVerdict{}
	if h := v.add(outcome(start, health.Failed, health.InProgress), timeout, start); h != v1alpha1.HealthDegraded {
		t.Errorf("target health %s, want Degraded", h)
	}
	if h := v.add(outcome(start, slices.Repeat([]health.Status{health.InProgress}, 6)...), timeout, start.Add(timeout)); h != v1alpha1.HealthDegraded {
		t.Errorf("a target past its timeout: health %s, want Degraded", h)
	}
	_, reason, msg = v.condition()
	if reason != v1alpha1.ReasonHealthCheckFailed || !strings.HasPrefix(msg, "not Current: Deployment web/d0: m0; ") ||
		strings.Count(msg, "Deployment ") != 5 || !strings.HasSuffix(msg, "; and 2 more") {
		t.Errorf("condition %s %q, want 5 objects named and 2 more counted", reason, msg)
	}
	if !v.recheck.IsZero() {
		t.Errorf("recheck at %s with nothing pending", v.recheck)
	}

	v = &healthVerdict{}
	h := v.add(outcome(start, health.Current), timeout, start.Add(time.Hour))
	if status, reason, _ := v.condition(); h != v1alpha1.HealthHealthy || status != metav1.ConditionTrue || reason != string(v1alpha1.HealthHealthy) {
		t.Errorf("a healthy target: %s, condition %s %s", h, status, reason)
	}
}

// withInventory is a ManifestSync whose status holds entries.
func withInventory(entries ...v1alpha1.InventoryEntry) *v1alpha1.ManifestSync {
	return &v1alpha1.ManifestSync{Status: v1alpha1.ManifestSyncStatus{Inventory: entries}}
}

// An inventory that cannot be read is not an empty one: a target whose
// output turned empty is held, and says why.
func TestHeldEmptyWithUnreadableInventory(t *testing.T) {
	ms := &v1alpha1.ManifestSync{Status: v1alpha1.ManifestSyncStatus{InventoryGzip: []byte("junk")}}
	res := &engine.Result{Targets: []*engine.TargetResult{{Name: "empty"}}}
	held := (&Reconciler{}).heldEmpty(ms, res)
	if e := held["empty"]; e == nil || !strings.Contains(e.Error(), "its inventory cannot be read; nothing was pruned") {
		t.Errorf("held %+v", held)
	}
	ms.Status.InventoryGzip = nil
	if held := (&Reconciler{}).heldEmpty(ms, res); len(held) != 0 {
		t.Errorf("an empty inventory held %+v", held)
	}
}

// settle lets go of the changes that went as planned, and nothing the
// report reads changes: counts, whether anything was written, failures
// and conflicts, the objects that are ours.
func TestSettleKeepsWhatTheReportReads(t *testing.T) {
	item := func(name string) inventoryItem {
		return inventoryItem{id: v1alpha1.ObjectID{Namespace: "web", Name: name, Kind: "ConfigMap"}, version: "v1", target: "web"}
	}
	changes := []Change{
		{Item: item("a"), Action: ActionCreated, ResourceVersion: "1"},
		{Item: item("b"), Action: ActionConfigured, ResourceVersion: "2"},
		{Item: item("c"), Action: ActionUnchanged, ResourceVersion: "3"},
		{Item: item("d"), Action: ActionSkipped},
	}
	whole := &targetOutcome{changes: changes}
	whole.record = newRecord("r", 1, "d", changes)
	want, wantOwned := whole.tally(), whole.appendOwned(nil)
	whole.settle()
	if len(whole.changes) != 0 {
		t.Errorf("settle kept %d changes of a complete record", len(whole.changes))
	}
	if got := whole.tally(); got != want || got != (tally{created: 1, configured: 1, unchanged: 2}) {
		t.Errorf("tally %+v after settle, %+v before", got, want)
	}
	if !whole.wrote() {
		t.Errorf("a settled outcome that created an object says it wrote nothing")
	}
	if got := whole.appendOwned(nil); !reflect.DeepEqual(got, wantOwned) {
		t.Errorf("owned %v after settle, %v before", got, wantOwned)
	}

	failed := append(slices.Clone(changes), Change{Item: item("e"), Action: ActionFailed, Err: errors.New("refused")})
	partial := &targetOutcome{changes: failed, record: newRecord("r", 1, "d", failed)}
	partial.record.partial = !partial.ok()
	partial.settle()
	if len(partial.changes) != len(failed) || len(partial.failures()) != 1 {
		t.Errorf("settle changed a partial record's outcome: %d changes, failures %v", len(partial.changes), partial.failures())
	}
}

// TestStatusPatch: the merge patch statusPatch writes turns the old
// status into the new one exactly (what client.MergeFrom's diff of the
// whole objects did), with cleared fields, a source gone from a map,
// the inventory moving between its plain and gzipped forms, and only
// the large fields changed.
func TestStatusPatch(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC))
	rows := func(states ...v1alpha1.TargetState) []v1alpha1.TargetStatus {
		var out []v1alpha1.TargetStatus
		for i, s := range states {
			out = append(out, v1alpha1.TargetStatus{Name: fmt.Sprint("t", i), Namespace: "ns", State: s, Objects: i})
		}
		return out
	}
	base := v1alpha1.ManifestSyncStatus{
		ObservedGeneration: 2,
		Conditions:         []metav1.Condition{{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Progressing", LastTransitionTime: now}},
		Inputs:             &v1alpha1.Inputs{Sources: map[string]string{"app": "sha256:a", "creds": "sha256:b"}, Transform: "sha256:t"},
		Targets:            rows(v1alpha1.TargetPending, v1alpha1.TargetPending),
		Inventory:          []v1alpha1.InventoryEntry{{ID: "a_x__Secret", Version: "v1", Target: "t0"}},
		TargetsSummary:     "0/2",
	}
	synced := base
	synced.Conditions = []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Synced", LastTransitionTime: now}}
	synced.Inputs = &v1alpha1.Inputs{Sources: map[string]string{"app": "sha256:c"}, Transform: "sha256:t"}
	synced.Targets = rows(v1alpha1.TargetSynced, v1alpha1.TargetSynced)
	synced.Inventory, synced.InventoryGzip, synced.InventoryCount = nil, []byte("\x1f\x8b not really gzip"), 7
	synced.TargetsSummary, synced.LastSuccessfulSyncTime = "2/2", &now
	rowsOnly := base
	rowsOnly.Targets = rows(v1alpha1.TargetFailed)
	cleared := base
	cleared.Targets, cleared.Inventory, cleared.Inputs, cleared.Conditions = nil, nil, nil, nil
	for _, c := range []struct {
		name     string
		from, to v1alpha1.ManifestSyncStatus
	}{
		{"same", base, base},
		{"synced", base, synced},
		{"back to plain", synced, base},
		{"rows only", base, rowsOnly},
		{"cleared", base, cleared},
		{"from nothing", v1alpha1.ManifestSyncStatus{}, synced},
	} {
		patch, err := statusPatch(&c.from, &c.to)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		doc, err := json.Marshal(&v1alpha1.ManifestSync{Status: c.from})
		if err != nil {
			t.Fatal(err)
		}
		patched, err := jsonpatch.MergePatch(doc, patch)
		if err != nil {
			t.Fatalf("%s: patch %s: %v", c.name, patch, err)
		}
		var got v1alpha1.ManifestSync
		if err := json.Unmarshal(patched, &got); err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got.Status, c.to) {
			t.Errorf("%s: patch %s\ngave %+v\nwant %+v", c.name, patch, got.Status, c.to)
		}
		if c.name == "same" && string(patch) != `{"status":{}}` {
			t.Errorf("no change patched %s", patch)
		}
	}
}

// A fields digest reads back as it is spelled in inventories written
// before it was kept as a number (16 hex digits); anything else is none.
func TestFieldsDigestSpelling(t *testing.T) {
	for _, s := range []string{"0123456789abcdef", "ffffffffffffffff", "00000000000000a1"} {
		if d := parseFieldsDigest(s); d == 0 || d.String() != s {
			t.Errorf("%q reads back as %q", s, d.String())
		}
	}
	for _, s := range []string{"", "0123", "0123456789abcdeg", "0123456789abcdef0"} {
		if d := parseFieldsDigest(s); d != 0 || d.String() != "" {
			t.Errorf("%q read as the digest %q", s, d.String())
		}
	}
}

// A prune's or deletion's round trips go roundTrips at once; once one
// fails as its cluster's failure, the calls of that cluster not yet made
// are not, and those of other clusters are.
func TestEachOf(t *testing.T) {
	down := errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
	if clusterFailure(down) == "" {
		t.Fatal("the test's error is no cluster failure")
	}
	memoErr := errors.New("cluster \"c\": unreachable")
	m := &clusterMemo{errs: map[string]error{"c": memoErr}}
	if errs := m.eachOf(0, func(int) string { return "a" }, func(int) error { t.Error("a call of nothing"); return nil }); len(errs) != 0 {
		t.Errorf("eachOf(0) = %v", errs)
	}
	const n = 200
	ref := func(i int) string { return []string{"a", "b", "c"}[i%3] }
	var (
		mu               sync.Mutex
		inFlight, most   int
		calls            = map[string]int{}
		full             = make(chan struct{})
		failedAt         = -1
		callsOfABeforeIt int
	)
	errs := m.eachOf(n, ref, func(i int) error {
		mu.Lock()
		calls[ref(i)]++
		inFlight++
		most = max(most, inFlight)
		if inFlight == roundTrips && most == roundTrips && calls["a"]+calls["b"] == roundTrips {
			close(full) // the first roundTrips calls, all in flight
		}
		fail := ref(i) == "a" && calls["a"] == 5
		if fail {
			failedAt, callsOfABeforeIt = i, calls["a"]
		}
		mu.Unlock()
		{ // each call waits until roundTrips of them were in flight at once
			select {
			case <-full:
			case <-time.After(30 * time.Second):
				t.Error("the first calls were not in flight together")
			}
		}
		mu.Lock()
		inFlight--
		mu.Unlock()
		if fail {
			return down
		}
		return nil
	})
	if most != roundTrips {
		t.Errorf("at most %d calls in flight, want %d", most, roundTrips)
	}
	if calls["c"] != 0 {
		t.Errorf("%d calls to the cluster the memo knows failed", calls["c"])
	}
	if want := (n + 1) / 3; calls["b"] != (n+1)/3 {
		t.Errorf("%d calls to cluster b, want %d", calls["b"], want)
	}
	// Calls of a already started when the failure came may be made;
	// none after.
	if calls["a"] > callsOfABeforeIt+roundTrips-1 {
		t.Errorf("%d calls to cluster a after its failure at its call %d", calls["a"], callsOfABeforeIt)
	}
	for i, err := range errs {
		switch {
		case ref(i) == "c" && err != memoErr:
			t.Errorf("%d: %v, want the memo's error", i, err)
		case ref(i) == "b" && err != nil:
			t.Errorf("%d: %v", i, err)
		case ref(i) == "a" && i == failedAt && err != down:
			t.Errorf("%d: %v, want its own failure", i, err)
		}
	}
	skipped := 0
	for i, err := range errs {
		if ref(i) == "a" && i != failedAt && err == down {
			skipped++
		}
	}
	if want := (n+2)/3 - calls["a"]; skipped != want {
		t.Errorf("%d calls of cluster a skipped with its failure, want %d", skipped, want)
	}
	// The failure is reported once, named by its cluster.
	c := &cluster{name: "a"}
	first := m.failure("a", c, down)
	if !errors.Is(first, down) || !strings.Contains(first.Error(), `cluster "a": unreachable`) {
		t.Errorf("first failure %v", first)
	}
	if again := m.failure("a", c, errors.New("i/o timeout")); again != first {
		t.Errorf("a second failure of cluster a is %v, want the first", again)
	}
	if denied := m.failure("b", c, nil); denied != nil {
		t.Errorf("no error gave %v", denied)
	}
}
