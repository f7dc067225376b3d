package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/health"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
)

const (
	// HookLabel marks a hook object of a ManifestSync (which OwnerLabel
	// names, so that the hook's changes wake it) with its phase. A hook
	// is in no inventory: never pruned, never corrected for drift.
	HookLabel = ssa.HookLabel
	// HookRunAnnotation is the run a hook object was created for: the
	// target's output digest and the phase, "sha256:...;PreSync". A
	// resync of the same output finds the hooks of its run by it and
	// creates none again.
	HookRunAnnotation = "manifestsync.dev/hook-run"
	// hookFieldManager suffixes the field manager of hook writes.
	hookFieldManager = "-hook"
)

// The phases a target's HookStatus reaches after the hooks' own.
const (
	hookSucceeded = "Succeeded"
	hookFailed    = "Failed"
)

// hookPoll bounds the wait for a hook between two looks: the watch of
// its kind wakes the ManifestSync sooner (a remote cluster has none).
const hookPoll = 10 * time.Second

// hookRun is the run of a target's hooks for its current output: phase
// by phase, wave by wave. It never sleeps: a hook that has not finished
// leaves the run waiting, and the reconcile ends; the hook's watch (or
// recheck) runs the next.
type hookRun struct {
	r       *Reconciler
	c       *cluster
	checker *health.Checker
	owner   string
	manager string
	timeout time.Duration
	plan    *engine.HookPlan
	status  v1alpha1.HookStatus
	// waiting names the hooks (or objects) the run waits for.
	waiting []string
	// recheck is when to look again while waiting.
	recheck time.Time
	// failed is the failure of the run, naming the hook; justFailed is
	// set when it failed in this reconcile (its event is recorded once).
	failed     error
	justFailed bool
}

// hookStatusOf is the HookStatus of target t in ms's last status.
func hookStatusOf(ms *v1alpha1.ManifestSync, t *engine.TargetResult) *v1alpha1.HookStatus {
	if row := findRow(ms.Status.Targets, t.Name, t.Namespace); row != nil {
		return row.Hooks
	}
	return nil
}

// hookRuns are the HookStatus of the rows of ms's last status that have
// one, by target name and namespace: read once per sync (a fan-out has
// tens of thousands of rows, most without hooks).
type hookRuns map[[2]string]*v1alpha1.HookStatus

func hookRunsOf(ms *v1alpha1.ManifestSync) hookRuns {
	var runs hookRuns
	for i, row := range ms.Status.Targets {
		if row.Hooks != nil {
			if runs == nil {
				runs = hookRuns{}
			}
			runs[[2]string{row.Name, row.Namespace}] = ms.Status.Targets[i].Hooks
		}
	}
	return runs
}

// unfinished reports whether the run of t's hooks for its current output
// has not ended: its objects must be made to go on with it.
func (runs hookRuns) unfinished(t *engine.TargetResult) bool {
	s := runs[[2]string{t.Name, t.Namespace}]
	return s != nil && s.Digest == t.Digest && s.Phase != hookSucceeded && s.Phase != hookFailed
}

// planHooks splits t's hooks from its ordinary objects. gated is t with
// the hooks named for this output and the objects never applied left
// out: what the write gate checks and whose kinds are watched; ordinary
// is what is applied in waves. run is nil when t has no hooks.
func (r *Reconciler) planHooks(ms *v1alpha1.ManifestSync, t *engine.TargetResult, checker *health.Checker) (gated, ordinary *engine.TargetResult, run *hookRun, err error) {
	plan, err := engine.PlanHooks(t.Objects, t.Digests)
	if err != nil || plan == nil {
		return t, t, nil, err
	}
	named := map[*unstructured.Unstructured]*unstructured.Unstructured{}
	for _, waves := range plan.Hooks {
		for _, w := range waves {
			for i, h := range w.Hooks {
				obj := named[h.Object]
				if obj == nil {
					obj = h.Object.DeepCopy()
					if obj.GetName() == "" {
						obj.SetName(engine.NameHook(obj.GetGenerateName(), t.Digest))
						obj.SetGenerateName("")
					}
					named[h.Object] = obj
				}
				w.Hooks[i].Object = obj
			}
		}
	}
	o, g := *t, *t
	o.Objects, o.Digests = plan.Objects, plan.Digests
	g.Objects, g.Digests = slices.Clone(plan.Objects), nil
	for _, obj := range named {
		g.Objects = append(g.Objects, obj)
	}
	slices.SortStableFunc(g.Objects[len(plan.Objects):], func(a, b *unstructured.Unstructured) int {
		return strings.Compare(v1alpha1.IDOf(a).String(), v1alpha1.IDOf(b).String())
	})
	if len(named) == 0 {
		return &o, &o, nil, nil // only objects never applied
	}
	run = &hookRun{r: r, checker: checker, owner: r.Options.owner(ms), manager: r.Options.fieldManager() + hookFieldManager,
		timeout: healthTimeout(ms), plan: plan, status: v1alpha1.HookStatus{Digest: t.Digest, Phase: string(engine.PhasePreSync)}}
	if prev := hookStatusOf(ms, t); prev != nil && prev.Digest == t.Digest {
		run.status = *prev
		run.status.Names = slices.Clone(prev.Names)
	}
	return &g, &o, run, nil
}

// phase is the run's phase.
func (h *hookRun) phase() string { return h.status.Phase }

// succeeded reports whether every hook of the run succeeded.
func (h *hookRun) succeeded() bool { return h.status.Phase == hookSucceeded }

// message says what the run waits for.
func (h *hookRun) message() string {
	return fmt.Sprintf("%s hooks: waiting for %s", h.status.Phase, strings.Join(h.waiting, ", "))
}

// before runs the PreSync phase; it reports whether the ordinary objects
// may be applied: the PreSync hooks all succeeded, now or before.
func (h *hookRun) before(ctx context.Context, c *cluster) bool {
	h.c = c
	switch h.status.Phase {
	case hookFailed:
		h.failed = errors.New(h.status.Message)
		h.runPhase(ctx, engine.PhaseSyncFail, false) // their delete policies
		h.waiting = nil
		return false
	case string(engine.PhasePreSync):
		if !h.runPhase(ctx, engine.PhasePreSync, true) {
			return false
		}
		h.status.Phase = string(engine.PhaseSync)
	}
	return true
}

// syncWaves are waves with the waves of the Sync hooks added (empty when
// they have no ordinary object).
func (h *hookRun) syncWaves(waves []engine.Wave) []engine.Wave {
	for _, w := range h.plan.Hooks[engine.PhaseSync] {
		if !slices.ContainsFunc(waves, func(o engine.Wave) bool { return o.N == w.N }) {
			waves = append(waves, engine.Wave{N: w.N})
		}
	}
	slices.SortFunc(waves, func(a, b engine.Wave) int { return a.N - b.N })
	return waves
}

// syncWave runs the Sync hooks of wave n, after its ordinary objects; it
// reports whether the waves after it may go on.
func (h *hookRun) syncWave(ctx context.Context, n int) bool {
	if h.status.Phase != string(engine.PhaseSync) {
		return true // they ran
	}
	for _, w := range h.plan.Hooks[engine.PhaseSync] {
		if w.N == n {
			return h.runWave(ctx, engine.PhaseSync, w)
		}
	}
	return true
}

// after runs the PostSync phase once every ordinary object applied
// (changes) is Current, as Argo CD waits for health.
func (h *hookRun) after(ctx context.Context, changes []Change) {
	if h.status.Phase == string(engine.PhaseSync) {
		for _, ch := range changes {
			if !ch.ours() {
				continue
			}
			// Unknown (a custom resource with no status and no rule)
			// passes, as Argo CD counts a kind it cannot judge healthy.
			if res := judge(ctx, h.c, h.checker, ch); res.Status != health.Current && res.Status != health.Unknown {
				h.waiting = append(h.waiting, ch.Item.id.String()+" to be Current before the PostSync hooks")
			}
		}
		if len(h.waiting) > 0 {
			h.poll()
			return
		}
		h.status.Phase = string(engine.PhasePostSync)
	}
	if h.status.Phase == string(engine.PhasePostSync) && h.runPhase(ctx, engine.PhasePostSync, true) {
		h.status.Phase, h.status.Message = hookSucceeded, ""
	}
}

// runPhase runs the waves of phase in order, each once all hooks of the
// one before it succeeded; it reports whether they all did. Without
// wait (SyncFail), every wave is created at once and none is waited for.
func (h *hookRun) runPhase(ctx context.Context, phase engine.HookPhase, wait bool) bool {
	for _, w := range h.plan.Hooks[phase] {
		if !h.runWave(ctx, phase, w) && wait {
			return false
		}
	}
	return h.failed == nil
}

// runWave creates the hooks of wave w that this run has not created, and
// judges them all: it reports whether every one succeeded. A hook that
// failed, or did not finish within spec.timeout of its creation, fails
// the run.
func (h *hookRun) runWave(ctx context.Context, phase engine.HookPhase, w engine.HookWave) bool {
	done := true
	for _, hk := range w.Hooks {
		ok, err := h.runHook(ctx, phase, hk)
		if err != nil {
			if phase == engine.PhaseSyncFail {
				if !strings.Contains(h.status.Message, err.Error()) {
					h.status.Message = truncate(h.status.Message + "; " + err.Error())
				}
				continue
			}
			h.fail(ctx, err)
			return false
		}
		done = done && ok
	}
	return done
}

// runHook creates one hook unless this run did, and judges it: ok when it
// succeeded; an error when it failed.
func (h *hookRun) runHook(ctx context.Context, phase engine.HookPhase, hk engine.HookObject) (ok bool, err error) {
	obj := hk.Object
	id := v1alpha1.IDOf(obj).String()
	what := fmt.Sprintf("hook %s %s", phase, id)
	run := h.status.Digest + ";" + string(phase)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(obj.GroupVersionKind())
	err = h.c.live.Get(ctx, client.ObjectKeyFromObject(obj), live)
	switch {
	case apierrors.IsNotFound(err):
		if slices.Contains(h.status.Names, id) {
			// Created by this run and gone: deleted once it succeeded
			// (HookSucceeded), or by someone, which counts as done.
			return true, nil
		}
		return false, h.create(ctx, phase, obj, run, what)
	case err != nil:
		return false, fmt.Errorf("%s: reading it: %w", what, err)
	case live.GetLabels()[OwnerLabel] != h.owner:
		// Not ours (an object ours from before it was a hook, without
		// HookLabel, is left by an earlier sync as a hook is).
		return false, fmt.Errorf("%s: it exists and is not a hook of this ManifestSync%s", what, ownedBy(live.GetLabels()[OwnerLabel]))
	case live.GetDeletionTimestamp() != nil:
		h.wait(what + " (an earlier one being deleted)")
		return false, nil
	case live.GetAnnotations()[HookRunAnnotation] != run:
		// Left by an earlier sync.
		if !hk.Hook.Deletes(engine.BeforeHookCreation) {
			return false, fmt.Errorf("%s: it exists from an earlier sync, and its delete policy is not BeforeHookCreation (before-hook-creation)", what)
		}
		if err := h.delete(ctx, live); err != nil {
			return false, fmt.Errorf("%s: deleting the one of an earlier sync: %w", what, err)
		}
		h.wait(what + " (an earlier one being deleted)")
		return false, nil
	}
	if !slices.Contains(h.status.Names, id) { // created, but the status write was lost
		h.status.Names = append(h.status.Names, id)
	}
	done, failure := h.judgeHook(live)
	if failure == "" && !done && time.Since(live.GetCreationTimestamp().Time) >= h.timeout {
		failure = fmt.Sprintf("did not finish within %s (spec.timeout)", h.timeout)
	}
	switch {
	case failure != "":
		if hk.Hook.Deletes(engine.HookFailed) {
			if err := h.delete(ctx, live); err != nil {
				failure += fmt.Sprintf(" (deleting it: %v)", err)
			}
		}
		return false, fmt.Errorf("%s failed: %s", what, failure)
	case !done:
		h.wait(what)
		h.recheckAt(live.GetCreationTimestamp().Add(h.timeout))
		return false, nil
	}
	if hk.Hook.Deletes(engine.HookSucceeded) {
		if err := h.delete(ctx, live); err != nil {
			return false, fmt.Errorf("%s succeeded; deleting it: %w", what, err)
		}
	}
	return true, nil
}

// create creates hook obj of run, marked as a hook of the ManifestSync.
// It goes through the cluster's client: the write gate decides it as any
// other write.
func (h *hookRun) create(ctx context.Context, phase engine.HookPhase, obj *unstructured.Unstructured, run, what string) error {
	obj = obj.DeepCopy()
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[OwnerLabel], labels[HookLabel] = h.owner, string(phase)
	if h.r.Options.ShardID != "" { // so that the replica's cache holds it, and its changes wake the run
		labels[ShardLabel] = h.r.Options.ShardID
	}
	obj.SetLabels(labels)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[HookRunAnnotation] = run
	obj.SetAnnotations(ann)
	if err := h.c.client.Create(ctx, obj, client.FieldOwner(h.manager)); err != nil {
		if apierrors.IsAlreadyExists(err) { // made meanwhile: looked at next time
			h.wait(what)
			return nil
		}
		return fmt.Errorf("%s: creating it: %w", what, err)
	}
	h.status.Names = append(h.status.Names, v1alpha1.IDOf(obj).String())
	h.wait(what)
	h.recheckAt(time.Now().Add(h.timeout))
	return nil
}

// delete deletes a hook object, its dependents (a Job's pods) after it.
func (h *hookRun) delete(ctx context.Context, live *unstructured.Unstructured) error {
	uid := live.GetUID()
	err := h.c.client.Delete(ctx, live, client.Preconditions{UID: &uid}, client.PropagationPolicy(metav1.DeletePropagationBackground))
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// judgeHook tells whether a hook finished: a Job by its Complete or
// Failed condition (failure is its reason and message), anything else by
// its health (Current, or Failed; a kind whose health cannot be judged is
// done once created).
func (h *hookRun) judgeHook(live *unstructured.Unstructured) (done bool, failure string) {
	if gvk := live.GroupVersionKind(); gvk.Group == "batch" && gvk.Kind == "Job" {
		conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["status"] != "True" {
				continue
			}
			switch m["type"] {
			case "Complete":
				return true, ""
			case "Failed":
				reason, _ := m["reason"].(string)
				msg, _ := m["message"].(string)
				return false, strings.TrimPrefix(reason+": "+msg, ": ")
			}
		}
		return false, ""
	}
	res := h.checker.Check(live)
	switch res.Status {
	case health.Current, health.Unknown: // Unknown: no status and no rule; done once created, as in Argo CD
		return true, ""
	case health.Failed:
		return false, res.Message
	}
	return false, ""
}

// fail ends the run with err, naming the hook, and runs the SyncFail
// hooks (created, not waited for).
func (h *hookRun) fail(ctx context.Context, err error) {
	h.failed, h.justFailed = err, true
	h.waiting, h.recheck = nil, time.Time{}
	h.status.Phase, h.status.Message = hookFailed, truncate(err.Error())
	h.runPhase(ctx, engine.PhaseSyncFail, false)
	h.waiting, h.recheck = nil, time.Time{}
}

func (h *hookRun) wait(what string) {
	h.waiting = append(h.waiting, what)
	h.poll()
}

// poll looks again within hookPoll at the latest.
func (h *hookRun) poll() { h.recheckAt(time.Now().Add(hookPoll)) }

func (h *hookRun) recheckAt(t time.Time) {
	if h.recheck.IsZero() || t.Before(h.recheck) {
		h.recheck = t
	}
}

// pending reports whether the run waits: it neither succeeded nor
// failed.
func (h *hookRun) pending() bool { return h.failed == nil && !h.succeeded() }
