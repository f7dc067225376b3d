package engine

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// The annotations of hooks as people wrote them for Argo CD and Helm; see
// docs/hooks.md for how each is read and where the semantics differ.
const (
	// ArgoHookAnnotation makes an object a hook of the phases it lists
	// (comma-separated): PreSync, Sync, PostSync, SyncFail; Skip alone
	// leaves it unapplied. Present, the Helm annotations are ignored, as
	// Argo CD ignores them.
	ArgoHookAnnotation = "argocd.argoproj.io/hook"
	// ArgoHookDeletePolicyAnnotation lists when a hook is deleted:
	// HookSucceeded, HookFailed, BeforeHookCreation (the default).
	ArgoHookDeletePolicyAnnotation = "argocd.argoproj.io/hook-delete-policy"
	// ArgoWaveAnnotation is Argo CD's wave of an object; WaveAnnotation,
	// when set too, wins.
	ArgoWaveAnnotation = "argocd.argoproj.io/sync-wave"
	// HelmHookAnnotation lists a Helm hook's events: pre-install and
	// pre-upgrade run as PreSync, post-install and post-upgrade as
	// PostSync; the events of deletes, rollbacks and tests are not run
	// (the object is not applied).
	HelmHookAnnotation = "helm.sh/hook"
	// HelmHookWeightAnnotation is a Helm hook's wave in its phase.
	HelmHookWeightAnnotation = "helm.sh/hook-weight"
	// HelmHookDeletePolicyAnnotation lists when a Helm hook is deleted:
	// before-hook-creation (the default), hook-succeeded, hook-failed.
	HelmHookDeletePolicyAnnotation = "helm.sh/hook-delete-policy"
)

// HookPhase is when a hook runs in a sync.
type HookPhase string

const (
	// PhasePreSync hooks run, wave by wave, before anything else of the
	// target is applied; each must finish before the next wave.
	PhasePreSync HookPhase = "PreSync"
	// PhaseSync hooks run in their wave, after its ordinary objects.
	PhaseSync HookPhase = "Sync"
	// PhasePostSync hooks run once every object is applied and Current.
	PhasePostSync HookPhase = "PostSync"
	// PhaseSyncFail hooks run when a hook of the sync failed.
	PhaseSyncFail HookPhase = "SyncFail"
)

// Phases are the hook phases in the order a sync runs them.
var Phases = []HookPhase{PhasePreSync, PhaseSync, PhasePostSync, PhaseSyncFail}

// HookDeletePolicy says when a hook object is deleted.
type HookDeletePolicy string

const (
	// BeforeHookCreation deletes a hook object left by an earlier sync,
	// and awaits its deletion, before the hook is created again. It is
	// the policy of a hook that names none, as in Argo CD and Helm.
	BeforeHookCreation HookDeletePolicy = "BeforeHookCreation"
	// HookSucceeded deletes the hook once it succeeded.
	HookSucceeded HookDeletePolicy = "HookSucceeded"
	// HookFailed deletes the hook once it failed.
	HookFailed HookDeletePolicy = "HookFailed"
)

// Hook is what an object's hook annotations say.
type Hook struct {
	// Phases are the phases the hook runs in, each once, in Phases'
	// order.
	Phases []HookPhase
	// DeletePolicies are when the hook object is deleted; never empty.
	DeletePolicies []HookDeletePolicy
}

// Deletes reports whether the hook has delete policy p.
func (h *Hook) Deletes(p HookDeletePolicy) bool { return slices.Contains(h.DeletePolicies, p) }

// helmEvents maps Helm's hook events to phases, as Argo CD maps them; ""
// is an event a sync does not run (deletes, rollbacks, tests).
var helmEvents = map[string]HookPhase{
	"pre-install":   PhasePreSync,
	"pre-upgrade":   PhasePreSync,
	"post-install":  PhasePostSync,
	"post-upgrade":  PhasePostSync,
	"pre-delete":    "",
	"post-delete":   "",
	"pre-rollback":  "",
	"post-rollback": "",
	"test":          "",
	"test-success":  "",
	"test-failure":  "",
}

// argoPhases are the values of ArgoHookAnnotation; "" is a phase a sync
// does not run (Argo CD runs PreDelete and PostDelete when an Application
// is deleted; a ManifestSync does not).
var argoPhases = map[string]HookPhase{
	"PreSync":    PhasePreSync,
	"Sync":       PhaseSync,
	"PostSync":   PhasePostSync,
	"SyncFail":   PhaseSyncFail,
	"Skip":       "",
	"PreDelete":  "",
	"PostDelete": "",
}

var (
	argoDeletePolicies = map[string]HookDeletePolicy{
		"BeforeHookCreation": BeforeHookCreation,
		"HookSucceeded":      HookSucceeded,
		"HookFailed":         HookFailed,
	}
	helmDeletePolicies = map[string]HookDeletePolicy{
		"before-hook-creation": BeforeHookCreation,
		"hook-succeeded":       HookSucceeded,
		"hook-failed":          HookFailed,
	}
)

// HookOf reads obj's hook annotations. hook is nil for an ordinary
// object; skip is set for an object that is never applied: Argo CD's
// Skip, or hooks only of phases or events a sync does not run (Helm's
// pre-delete, test, ...; Argo CD's PreDelete, PostDelete). An unknown
// phase, event or policy is an error naming the object and annotation.
func HookOf(obj *unstructured.Unstructured) (hook *Hook, skip bool, err error) {
	ann := obj.GetAnnotations()
	key, names := ArgoHookAnnotation, argoPhases
	v, ok := ann[ArgoHookAnnotation]
	if !ok {
		key, names = HelmHookAnnotation, helmEvents
		if v, ok = ann[HelmHookAnnotation]; !ok {
			return nil, false, nil
		}
		if strings.TrimSpace(v) == "crd-install" { // Helm 2's: an ordinary object, as in Argo CD
			return nil, false, nil
		}
	}
	h := &Hook{}
	for _, word := range csv(v) {
		phase, known := names[word]
		if !known {
			return nil, false, fmt.Errorf("%s: annotation %s: %q is not one of %s", describe(obj), key, word, strings.Join(slices.Sorted(maps.Keys(names)), ", "))
		}
		if phase != "" && !slices.Contains(h.Phases, phase) {
			h.Phases = append(h.Phases, phase)
		}
	}
	if len(h.Phases) == 0 {
		return nil, true, nil
	}
	slices.SortFunc(h.Phases, func(a, b HookPhase) int { return slices.Index(Phases, a) - slices.Index(Phases, b) })
	for _, p := range []struct {
		key   string
		names map[string]HookDeletePolicy
	}{{ArgoHookDeletePolicyAnnotation, argoDeletePolicies}, {HelmHookDeletePolicyAnnotation, helmDeletePolicies}} {
		for _, word := range csv(ann[p.key]) {
			policy, known := p.names[word]
			if !known {
				return nil, false, fmt.Errorf("%s: annotation %s: %q is not one of %s", describe(obj), p.key, word, strings.Join(slices.Sorted(maps.Keys(p.names)), ", "))
			}
			if !h.Deletes(policy) {
				h.DeletePolicies = append(h.DeletePolicies, policy)
			}
		}
	}
	if len(h.DeletePolicies) == 0 {
		h.DeletePolicies = []HookDeletePolicy{BeforeHookCreation}
	}
	return h, false, nil
}

// csv splits an annotation's comma-separated list, dropping blanks.
func csv(v string) []string {
	var out []string
	for w := range strings.SplitSeq(v, ",") {
		if w = strings.TrimSpace(w); w != "" {
			out = append(out, w)
		}
	}
	return out
}

// HookObject is a hook of a target with what its annotations say.
type HookObject struct {
	Object *unstructured.Unstructured
	Hook   *Hook
}

// HookPlan is a target's objects split for a sync: the ordinary objects,
// applied in waves (Waves), and the hooks of each phase in waves, each
// wave in Argo CD's kind order, then by name.
type HookPlan struct {
	// Objects are the ordinary objects, in their given order; Digests
	// their digests.
	Objects []*unstructured.Unstructured
	Digests []string
	// Hooks are the waves of hooks of each phase, in ascending order.
	Hooks map[HookPhase][]HookWave
	// Skipped are the objects never applied.
	Skipped []*unstructured.Unstructured
}

// HookWave is the hooks of one wave of a phase, in the order they run.
type HookWave struct {
	N     int
	Hooks []HookObject
}

// Len counts the plan's hooks, a hook of two phases twice.
func (p *HookPlan) Len() int {
	n := 0
	for _, waves := range p.Hooks {
		for _, w := range waves {
			n += len(w.Hooks)
		}
	}
	return n
}

// PlanHooks splits objs (with their digests, which may be nil) into
// ordinary objects, hooks and skipped objects. It returns nil when every
// object is ordinary.
func PlanHooks(objs []*unstructured.Unstructured, digests []string) (*HookPlan, error) {
	var plan *HookPlan
	for i, obj := range objs {
		h, skip, err := HookOf(obj)
		if err != nil {
			return nil, err
		}
		if h == nil && !skip {
			continue
		}
		if plan == nil {
			plan = &HookPlan{Hooks: map[HookPhase][]HookWave{}}
			plan.Objects = slices.Clone(objs[:i])
			if digests != nil {
				plan.Digests = slices.Clone(digests[:i])
			}
		}
		if skip {
			plan.Skipped = append(plan.Skipped, obj)
			continue
		}
		n, err := WaveOf(obj)
		if err != nil {
			return nil, err
		}
		for _, phase := range h.Phases {
			plan.add(phase, n, HookObject{Object: obj, Hook: h})
		}
	}
	if plan == nil {
		return nil, nil
	}
	// The ordinary objects after the first hook.
	seen := map[*unstructured.Unstructured]bool{}
	for _, o := range plan.Skipped {
		seen[o] = true
	}
	for _, waves := range plan.Hooks {
		for _, w := range waves {
			for _, h := range w.Hooks {
				seen[h.Object] = true
			}
		}
	}
	for i := len(plan.Objects); i < len(objs); i++ {
		if !seen[objs[i]] {
			plan.Objects = append(plan.Objects, objs[i])
			if digests != nil {
				plan.Digests = append(plan.Digests, digests[i])
			}
		}
	}
	for phase, waves := range plan.Hooks {
		slices.SortFunc(waves, func(a, b HookWave) int { return cmp.Compare(a.N, b.N) })
		for _, w := range waves {
			slices.SortStableFunc(w.Hooks, func(a, b HookObject) int { return compareInWave(a.Object, b.Object) })
		}
		plan.Hooks[phase] = waves
	}
	return plan, nil
}

func (p *HookPlan) add(phase HookPhase, n int, h HookObject) {
	waves := p.Hooks[phase]
	i := slices.IndexFunc(waves, func(w HookWave) bool { return w.N == n })
	if i < 0 {
		waves = append(waves, HookWave{N: n})
		i = len(waves) - 1
	}
	waves[i].Hooks = append(waves[i].Hooks, h)
	p.Hooks[phase] = waves
}

// HookName is a hook's name, or its generateName when it has none: how
// it is ordered and told apart before a sync names it.
func HookName(obj *unstructured.Unstructured) string {
	return cmp.Or(obj.GetName(), obj.GetGenerateName())
}

// generatedHook reports whether obj is a hook named by its generateName
// alone, which a sync names (NameHook).
func generatedHook(obj *unstructured.Unstructured) bool {
	if obj.GetName() != "" || obj.GetGenerateName() == "" {
		return false
	}
	h, _, err := HookOf(obj)
	return err == nil && h != nil
}

// NameHook is the name a sync gives a hook named by its generateName:
// generateName and the first five hex digits of the target's output
// digest, so that every new output of the target names it anew and a
// resync of the same output finds the hook it created.
func NameHook(generateName, digest string) string {
	hex := strings.TrimPrefix(digest, "sha256:")
	return generateName + hex[:min(5, len(hex))]
}

// hookID is obj's id for telling the objects of a target apart: a hook
// named by its generateName is told by it (with a "*").
func hookID(obj *unstructured.Unstructured) v1alpha1.ObjectID {
	id := v1alpha1.IDOf(obj)
	if generatedHook(obj) {
		id.Name = obj.GetGenerateName() + "*"
	}
	return id
}
