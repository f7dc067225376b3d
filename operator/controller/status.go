package controller

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/internal/plural"
)

// historyLimit is how many evaluated revisions status.history keeps.
const historyLimit = 10

// maxMessage bounds messages in conditions, rows and events.
const maxMessage = 1024

// setConditions sets Ready, Reconciling and Stalled from the outcome's
// reason: Ready is True only for Synced; a failure that retrying may fix
// (a source, an apply) or that ends when another ManifestSync is Ready is
// Reconciling, one that needs a change of the inputs or of the cluster
// (evaluation, validation, conflict, a cycle of dependencies) is Stalled.
func setConditions(ms *v1alpha1.ManifestSync, reason, msg string) {
	msg = truncate(msg)
	status := func(b bool) metav1.ConditionStatus {
		if b {
			return metav1.ConditionTrue
		}
		return metav1.ConditionFalse
	}
	var retrying, stalled bool
	switch reason {
	case v1alpha1.ReasonSourceFailed, v1alpha1.ReasonSourceVerifyFailed, v1alpha1.ReasonApplyFailed, v1alpha1.ReasonDependencyNotReady, v1alpha1.ReasonProgressing:
		retrying = true
	case v1alpha1.ReasonEvalFailed, v1alpha1.ReasonValidationFailed, v1alpha1.ReasonConflict, v1alpha1.ReasonServiceAccountRequired,
		v1alpha1.ReasonEmptyOutput, v1alpha1.ReasonDependencyCycle:
		stalled = true
	}
	for _, c := range []struct {
		typ string
		on  bool
	}{
		{v1alpha1.ConditionReady, reason == v1alpha1.ReasonSynced},
		{v1alpha1.ConditionReconciling, retrying},
		{v1alpha1.ConditionStalled, stalled},
	} {
		apimeta.SetStatusCondition(&ms.Status.Conditions, metav1.Condition{
			Type:               c.typ,
			Status:             status(c.on),
			ObservedGeneration: ms.Generation,
			Reason:             reason,
			Message:            msg,
		})
	}
	ms.Status.ObservedGeneration = ms.Generation
}

// recordEvaluation sets what was evaluated and adds it to the history.
func recordEvaluation(ms *v1alpha1.ManifestSync, res *engine.Result, outputDigest, result string, now metav1.Time) {
	s := &ms.Status
	s.LastEvaluatedRevision = res.Revision
	inputs := res.Inputs.DeepCopy()
	s.Inputs = inputs
	if len(s.History) > 0 && s.History[0].Revision == res.Revision && s.History[0].OutputDigest == outputDigest {
		if s.History[0].Result != result {
			s.History[0].Result, s.History[0].Time = result, now
		}
		return
	}
	entry := v1alpha1.HistoryEntry{Revision: res.Revision, Inputs: inputs.DeepCopy(), OutputDigest: outputDigest, Time: now, Result: result}
	s.History = append([]v1alpha1.HistoryEntry{entry}, s.History...)
	if len(s.History) > historyLimit {
		s.History = s.History[:historyLimit]
	}
}

// outputDigest is a digest over every target's objects.
func outputDigest(res *engine.Result) string {
	lines := make([]string, 0, len(res.Targets))
	for _, t := range res.Targets {
		lines = append(lines, t.ID()+"="+t.Digest+"\n")
	}
	slices.Sort(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// setSyncedStatus fills status after the targets were synced and pruned.
// It returns the Ready reason and message, and the health verdict.
func setSyncedStatus(ms *v1alpha1.ManifestSync, res *engine.Result, outcomes []*targetOutcome, pr pruneResult, gzipThreshold int, now metav1.Time) (string, string, *healthVerdict) {
	s := &ms.Status
	prev := s.Targets
	s.Targets = make([]v1alpha1.TargetStatus, 0, len(outcomes))
	var failures, empties, conflicts, hookFailures, hookWaits []string
	synced, wrote, waiting := 0, false, false
	verdict, timeout := &healthVerdict{}, healthTimeout(ms)
	for _, o := range outcomes {
		t := o.target
		row := v1alpha1.TargetStatus{Name: t.Name, Cluster: t.Cluster, Namespace: t.Namespace, State: o.state(), Objects: t.Len()}
		old := findRow(prev, t.Name, t.Namespace)
		switch {
		case o.steady && old != nil && old.State == v1alpha1.TargetSynced:
			row = *old
		case row.State == v1alpha1.TargetSynced:
			row.LastSyncTime = &now
			if old != nil && !o.wrote() && old.State == v1alpha1.TargetSynced && len(o.drift) == 0 {
				row.LastSyncTime = old.LastSyncTime
			}
		case old != nil:
			row.LastSyncTime = old.LastSyncTime
		}
		for _, err := range o.failures() {
			failures = append(failures, err.Error())
		}
		for _, err := range o.conflicts() {
			conflicts = append(conflicts, fmt.Sprintf("target %q: %v", t.ID(), err))
		}
		if o.empty != nil {
			empties = append(empties, o.empty.Error())
		}
		switch h := o.hooks; {
		case h != nil && h.failed != nil:
			hookFailures = append(hookFailures, fmt.Sprintf("target %q: %v", t.ID(), h.failed))
		case h != nil && h.pending() && len(h.waiting) > 0:
			hookWaits = append(hookWaits, fmt.Sprintf("target %q: %s", t.ID(), h.message()))
		}
		switch {
		case row.State == v1alpha1.TargetSynced && len(o.drift) > 0 && !o.corrected:
			row.Message = truncate("drifted: " + strings.Join(o.drift, ", "))
		case o.empty != nil:
			row.Message = truncate(strings.TrimPrefix(o.empty.Error(), fmt.Sprintf("target %q: ", t.ID())))
		case o.hooks != nil && o.hooks.failed != nil && len(o.failures()) == 0:
			row.Message = truncate(o.hooks.failed.Error())
		case row.State == v1alpha1.TargetPending && o.waiting == nil:
			row.Message = truncate(o.hooks.message())
		case row.State == v1alpha1.TargetPending:
			row.Message = truncate(o.waiting.message())
		case row.State != v1alpha1.TargetSynced:
			row.Message = truncate(joinErrors(append(o.failures(), o.conflicts()...)))
		case !o.steady:
			row.Message = ""
		}
		if row.State == v1alpha1.TargetSynced {
			synced++
		}
		waiting = waiting || o.waiting != nil
		row.Health = verdict.add(o, timeout, time.Now()) // not now, cut to the second: the timeout is checked when it passes
		row.Hooks = hookStatus(o, old)
		if h := o.hooks; h != nil && !h.recheck.IsZero() && (verdict.recheck.IsZero() || h.recheck.Before(verdict.recheck)) {
			verdict.recheck = h.recheck
		}
		wrote = wrote || o.wrote()
		s.Targets = append(s.Targets, row)
	}
	if pr.err != nil {
		failures = append(failures, pr.err.Error())
	}
	if err := writeInventory(s, pr.inventory, gzipThreshold); err != nil {
		failures = append(failures, err.Error())
	}
	s.TargetsSummary = fmt.Sprintf("%d/%d", synced, len(outcomes))

	reason, msg := v1alpha1.ReasonSynced, fmt.Sprintf("Applied revision %s to %s", v1alpha1.ShortRevision(res.Revision), plural.Count(len(outcomes), "target"))
	switch {
	case len(failures) > 0:
		reason, msg = v1alpha1.ReasonApplyFailed, strings.Join(slices.Concat(failures, empties, conflicts), "; ")
	case len(empties) > 0:
		reason, msg = v1alpha1.ReasonEmptyOutput, strings.Join(append(empties, conflicts...), "; ")
	case len(hookFailures) > 0:
		reason, msg = v1alpha1.ReasonHookFailed, strings.Join(slices.Concat(hookFailures, empties, conflicts), "; ")
	case len(conflicts) > 0:
		reason, msg = v1alpha1.ReasonConflict, strings.Join(conflicts, "; ")
	}
	if reason == v1alpha1.ReasonSynced && len(hookWaits) > 0 {
		reason, msg = v1alpha1.ReasonProgressing, msg+"; "+strings.Join(hookWaits, "; ")
	}
	if reason == v1alpha1.ReasonSynced && !waiting {
		s.LastAppliedRevision = res.Revision
		s.ShortRevision = v1alpha1.ShortRevision(res.Revision)
		if wrote || len(pr.pruned) > 0 || s.LastSuccessfulSyncTime == nil || !apimeta.IsStatusConditionTrue(s.Conditions, v1alpha1.ConditionReady) {
			s.LastSuccessfulSyncTime = &now
		}
	}
	healthy, healthReason, healthMsg := verdict.condition()
	if reason == v1alpha1.ReasonSynced && (ms.Spec.Wait || waiting) && healthy != metav1.ConditionTrue {
		// Under spec.wait, Ready means healthy.
		reason, msg = healthReason, msg+"; "+healthMsg
	}
	recordEvaluation(ms, res, outputDigest(res), reason, now)
	setConditions(ms, reason, msg)
	apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{
		Type:               v1alpha1.ConditionHealthy,
		Status:             healthy,
		ObservedGeneration: ms.Generation,
		Reason:             healthReason,
		Message:            truncate(healthMsg),
	})
	return reason, msg, verdict
}

// hookStatus is the Hooks of a target's row: its run's, else, while the
// target's output is the same, the last row's (a steady target runs
// none).
func hookStatus(o *targetOutcome, old *v1alpha1.TargetStatus) *v1alpha1.HookStatus {
	switch {
	case o.hooks != nil:
		s := o.hooks.status
		return &s
	case old != nil && old.Hooks != nil && old.Hooks.Digest == o.target.Digest:
		return old.Hooks
	}
	return nil
}

// setFailedTargets sets the target rows of a sync that stopped before any
// target was touched (res, when there is one, is the evaluation that
// failed) and returns the failure's message: each distinct error once,
// with the targets it is of, so that a script failing the same way for
// every target says so once.
func setFailedTargets(ms *v1alpha1.ManifestSync, res *engine.Result, reason string, cause error) string {
	what := "evaluation failed"
	switch reason {
	case v1alpha1.ReasonSourceFailed:
		what = "source failed"
	case v1alpha1.ReasonSourceVerifyFailed:
		what = "source not verified"
	case v1alpha1.ReasonValidationFailed:
		what = "validation failed"
	case v1alpha1.ReasonServiceAccountRequired:
		what = "not synced"
	}
	s := &ms.Status
	if res == nil {
		if len(s.Targets) == 0 {
			for _, t := range ms.Spec.Targets {
				s.Targets = append(s.Targets, v1alpha1.TargetStatus{Name: t.Name, Namespace: t.Namespace})
			}
		}
		for i := range s.Targets {
			s.Targets[i].State, s.Targets[i].Message = v1alpha1.TargetFailed, brief(what+": "+cause.Error())
		}
		s.TargetsSummary = fmt.Sprintf("0/%d", len(s.Targets))
		return cause.Error()
	}
	var (
		rows     = make([]v1alpha1.TargetStatus, 0, len(res.Targets))
		messages []string                // distinct, in target order
		of       = map[string][]string{} // message -> target ids
	)
	for _, t := range res.Targets {
		row := v1alpha1.TargetStatus{Name: t.Name, Cluster: t.Cluster, Namespace: t.Namespace, Objects: t.Len()}
		if old := findRow(s.Targets, t.Name, t.Namespace); old != nil {
			row = *old // what the cluster has stays as it was
		}
		if t.Err == nil {
			row.State, row.Message = v1alpha1.TargetPending, "not applied: the evaluation of other targets failed"
		} else {
			msg := strings.TrimPrefix(t.Err.Error(), fmt.Sprintf("target %q: ", t.ID()))
			row.State, row.Message = v1alpha1.TargetFailed, brief(what+": "+msg)
			if of[msg] == nil {
				messages = append(messages, msg)
			}
			of[msg] = append(of[msg], t.ID())
		}
		rows = append(rows, row)
	}
	s.Targets = rows
	s.TargetsSummary = fmt.Sprintf("0/%d", len(rows))
	parts := make([]string, len(messages))
	for i, msg := range messages {
		parts[i] = targetList(of[msg]) + ": " + msg
	}
	return strings.Join(parts, "; ")
}

// targetList names targets in a message: `target "a"`, `targets "a",
// "b"`, and past a few, how many more.
func targetList(ids []string) string {
	const shown = 5
	if len(ids) == 1 {
		return fmt.Sprintf("target %q", ids[0])
	}
	quoted := make([]string, 0, shown)
	for _, id := range ids[:min(len(ids), shown)] {
		quoted = append(quoted, strconv.Quote(id))
	}
	out := "targets " + strings.Join(quoted, ", ")
	if n := len(ids) - shown; n > 0 {
		out += fmt.Sprintf(" and %d more", n)
	}
	return out
}

// brief is the first line of a message, cut short, for a target row.
func brief(msg string) string {
	const limit = 200
	msg, _, cut := strings.Cut(msg, "\n")
	if len(msg) > limit {
		i := limit
		for i > 0 && !utf8Start(msg[i]) {
			i--
		}
		msg, cut = msg[:i], true
	}
	if cut {
		msg += "..."
	}
	return msg
}

func findRow(rows []v1alpha1.TargetStatus, name, namespace string) *v1alpha1.TargetStatus {
	for i := range rows {
		if rows[i].Name == name && rows[i].Namespace == namespace {
			return &rows[i]
		}
	}
	return nil
}

func joinErrors(errs []error) string {
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage - len("...")
	for cut > 0 && !utf8Start(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }

// patchStatus writes ms's status when it differs from orig's.
func (r *Reconciler) patchStatus(ctx context.Context, st *syncState, orig, ms *v1alpha1.ManifestSync) error {
	if equality.Semantic.DeepEqual(orig.Status, ms.Status) {
		return nil
	}
	patch, err := statusPatch(&orig.Status, &ms.Status)
	if err != nil {
		return fmt.Errorf("updating status: %w", err)
	}
	if err := r.Client.Status().Patch(ctx, ms, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("updating status: %w", err)
	}
	st.wrote(ms)
	return nil
}

// statusPatch is the JSON merge patch that turns the status from into
// to. The small fields are diffed; the target rows and the inventory,
// which a fan-out makes large, are sent whole when they changed (as a
// merge patch replaces a list anyway). client.MergeFrom would marshal
// both whole objects and diff them as maps: megabytes for a status of
// a thousand rows, at the moment a sync's outcomes are still held.
func statusPatch(from, to *v1alpha1.ManifestSyncStatus) ([]byte, error) {
	small := func(s *v1alpha1.ManifestSyncStatus) ([]byte, error) {
		c := *s
		c.Targets, c.Inventory, c.InventoryGzip = nil, nil, nil
		return json.Marshal(c)
	}
	a, err := small(from)
	if err != nil {
		return nil, err
	}
	b, err := small(to)
	if err != nil {
		return nil, err
	}
	diff, err := jsonpatch.CreateMergePatch(a, b) // an object, "{}" when equal
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString(`{"status":`)
	buf.Write(bytes.TrimSuffix(bytes.TrimSpace(diff), []byte("}")))
	fields := len(bytes.TrimSpace(diff)) > 2
	large := func(name string, changed, empty bool, v any) error {
		if !changed {
			return nil
		}
		if fields {
			buf.WriteByte(',')
		}
		fields = true
		buf.WriteString(strconv.Quote(name) + ":")
		if empty { // omitted: a merge patch removes it with null
			buf.WriteString("null")
			return nil
		}
		return json.NewEncoder(&buf).Encode(v)
	}
	if err := errors.Join(
		large("targets", !equality.Semantic.DeepEqual(from.Targets, to.Targets), len(to.Targets) == 0, to.Targets),
		large("inventory", !equality.Semantic.DeepEqual(from.Inventory, to.Inventory), len(to.Inventory) == 0, to.Inventory),
		large("inventoryGzip", !bytes.Equal(from.InventoryGzip, to.InventoryGzip), len(to.InventoryGzip) == 0, to.InventoryGzip),
	); err != nil {
		return nil, err
	}
	buf.WriteString("}}")
	return buf.Bytes(), nil
}

// Event reasons.
const (
	EventSynced           = "Synced"
	EventSyncFailed       = "SyncFailed"
	EventPruned           = "Pruned"
	EventConflict         = "Conflict"
	EventValidationFailed = "ValidationFailed"
	EventDriftCorrected   = "DriftCorrected"
	EventDriftDetected    = "DriftDetected"
	EventEmptyOutput      = "EmptyOutput"
	// EventSourceVerifyFailed: a source's verify refused the commit, tag
	// or artifact read; nothing was applied.
	EventSourceVerifyFailed = "SourceVerifyFailed"
	// EventHealthCheckFailed: objects Failed, or were not Current within
	// spec.timeout.
	EventHealthCheckFailed = "HealthCheckFailed"
)

// event records a Kubernetes event on ms; action says what the operator
// was doing ("Apply", "Prune", ...).
func (r *Reconciler) event(ms *v1alpha1.ManifestSync, warning bool, reason, action, msg string) {
	if r.Recorder == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(ms, nil, typ, reason, action, "%s", truncate(msg))
}

// syncEvents records the events of one sync.
func (r *Reconciler) syncEvents(ms *v1alpha1.ManifestSync, res *engine.Result, outcomes []*targetOutcome, pr pruneResult, wasReady bool) {
	var created, configured, unchanged int
	for _, o := range outcomes {
		if o.corrected && o.wrote() {
			r.event(ms, false, EventDriftCorrected, "Apply", fmt.Sprintf("Target %q: re-applied %s", o.target.ID(), strings.Join(o.drift, ", ")))
		}
		// A drift is found once: its record then holds the object as it
		// is, so the event is not repeated at every resync.
		if len(o.drift) > 0 && !o.corrected && ms.Spec.Policy.Drift == v1alpha1.DriftReport {
			r.event(ms, true, EventDriftDetected, "Apply", fmt.Sprintf("Target %q: drifted: %s", o.target.ID(), strings.Join(o.drift, ", ")))
		}
		if o.empty != nil {
			r.event(ms, true, EventEmptyOutput, "Prune", o.empty.Error())
		}
		t := o.tally()
		created, configured, unchanged = created+t.created, configured+t.configured, unchanged+t.unchanged
		if errs := o.conflicts(); len(errs) > 0 {
			r.event(ms, true, EventConflict, "Apply", fmt.Sprintf("Target %q: %s", o.target.ID(), joinErrors(errs)))
		}
		if errs := o.failures(); len(errs) > 0 {
			r.event(ms, true, EventSyncFailed, "Apply", joinErrors(errs))
		}
		if h := o.hooks; h != nil && h.justFailed {
			r.event(ms, true, EventSyncFailed, "Hook", fmt.Sprintf("Target %q: %v", o.target.ID(), h.failed))
		}
	}
	if len(pr.pruned) > 0 {
		names := make([]string, len(pr.pruned))
		for i, id := range pr.pruned {
			names[i] = id.String()
		}
		r.event(ms, false, EventPruned, "Prune", "Pruned "+strings.Join(names, ", "))
	}
	if pr.err != nil {
		r.event(ms, true, EventSyncFailed, "Prune", pr.err.Error())
	}
	ready := apimeta.IsStatusConditionTrue(ms.Status.Conditions, v1alpha1.ConditionReady)
	if ready && (created+configured > 0 || !wasReady) {
		r.event(ms, false, EventSynced, "Apply", fmt.Sprintf("Applied revision %s to %s: %d created, %d configured, %d unchanged",
			v1alpha1.ShortRevision(res.Revision), plural.Count(len(outcomes), "target"), created, configured, unchanged))
	}
}
