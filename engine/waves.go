package engine

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// WaveAnnotation orders the objects of a target: waves are applied in
// ascending order (the default is 0), pruned in descending order.
const WaveAnnotation = "manifestsync.dev/wave"

// WaveOf is obj's wave: the integer of its WaveAnnotation; without one,
// of Argo CD's ArgoWaveAnnotation; without either, of a Helm hook's
// HelmHookWeightAnnotation; 0 without any.
func WaveOf(obj *unstructured.Unstructured) (int, error) {
	ann := obj.GetAnnotations()
	for _, key := range []string{WaveAnnotation, ArgoWaveAnnotation, HelmHookWeightAnnotation} {
		v, ok := ann[key]
		if !ok {
			continue
		}
		if _, helm := ann[HelmHookAnnotation]; key == HelmHookWeightAnnotation && !helm {
			break // a weight means nothing on an object that is not a Helm hook
		}
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return 0, fmt.Errorf("%s: annotation %s: %q is not an integer", v1alpha1.IDOf(obj), key, v)
		}
		return n, nil
	}
	return 0, nil
}

// WaveOfAnnotations is the wave of an object with annotations ann, as
// WaveOf reads it; an annotation that is not an integer counts as 0.
func WaveOfAnnotations(ann map[string]string) int {
	o := &unstructured.Unstructured{Object: map[string]any{}}
	o.SetAnnotations(ann)
	n, _ := WaveOf(o)
	return n
}

// Wave is the objects of one wave, in apply order.
type Wave struct {
	N       int
	Objects []*unstructured.Unstructured
}

// Waves groups the ordinary objects of objs by wave, in ascending order
// (hooks, and the objects never applied, are left to PlanHooks). The wave
// of an object is its manifestsync.dev/wave, else its Argo CD sync-wave
// (WaveOf), except that a Namespace or a CRD is applied in the wave of
// the first object that needs it (liftDependencies). Inside a wave,
// objects are in Argo CD's order (compareInWave): by kind (kindOrder:
// Namespaces first, CustomResourceDefinitions before the custom
// resources, which come after every kind listed, webhook configurations
// last), then by name, then namespace. The order in which the evaluation
// returns objects (sortObjects) is left as it is: it is what the digests
// and eval's output are made of.
func Waves(objs []*unstructured.Unstructured) ([]Wave, error) {
	ordinary := make([]waveEntry, 0, len(objs))
	for _, obj := range objs {
		switch h, skip, err := HookOf(obj); {
		case err != nil:
			return nil, err
		case h != nil || skip:
			continue
		}
		n, err := WaveOf(obj)
		if err != nil {
			return nil, err
		}
		ordinary = append(ordinary, waveEntry{inWaveKey: keyInWave(obj), wave: n})
	}
	liftDependencies(ordinary)
	slices.SortStableFunc(ordinary, func(a, b waveEntry) int {
		return cmp.Or(cmp.Compare(a.wave, b.wave), compareKeys(a.inWaveKey, b.inWaveKey))
	})
	var out []Wave
	for i, e := range ordinary {
		if i == 0 || e.wave != ordinary[i-1].wave {
			out = append(out, Wave{N: e.wave})
		}
		w := &out[len(out)-1]
		w.Objects = append(w.Objects, e.obj)
	}
	if out == nil {
		out = []Wave{}
	}
	return out, nil
}

// waveEntry is an ordinary object with its wave and its key inside it.
type waveEntry struct {
	inWaveKey
	wave int
}

// inWaveKey is what orders an object inside its wave (compareKeys),
// read once, not at every comparison.
type inWaveKey struct {
	obj      *unstructured.Unstructured
	gk       schema.GroupKind
	rank     int
	name, ns string
}

func keyInWave(obj *unstructured.Unstructured) inWaveKey {
	gk := obj.GroupVersionKind().GroupKind()
	return inWaveKey{obj: obj, gk: gk, rank: kindRank(gk), name: HookName(obj), ns: obj.GetNamespace()}
}

// compareKeys orders two objects (or hooks) of one wave as Argo CD does:
// by kindRank, then by name (a hook's generateName when it has none);
// then by namespace, for an order that never depends on the input's.
func compareKeys(a, b inWaveKey) int {
	return cmp.Or(cmp.Compare(a.rank, b.rank), strings.Compare(a.name, b.name), strings.Compare(a.ns, b.ns))
}

// compareInWave is compareKeys of two objects.
func compareInWave(a, b *unstructured.Unstructured) int {
	return compareKeys(keyInWave(a), keyInWave(b))
}

var (
	namespaceKind = schema.GroupKind{Kind: "Namespace"}
	crdKind       = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}
)

// liftDependencies moves a Namespace, or a CRD, of a later wave than an
// object in it (of its kind) to that object's wave, as Argo CD does
// (gitops-engine's adjustDeps): what an object needs is never applied
// after it.
func liftDependencies(objs []waveEntry) {
	type need struct {
		namespace string
		gk        schema.GroupKind
	}
	first := map[need]int{} // the lowest wave that needs each
	note := func(k need, n int) {
		if w, ok := first[k]; !ok || n < w {
			first[k] = n
		}
	}
	lifted := false
	for _, e := range objs {
		if e.ns != "" {
			note(need{namespace: e.ns}, e.wave)
		}
		note(need{gk: e.gk}, e.wave)
		lifted = lifted || e.gk == namespaceKind || e.gk == crdKind
	}
	if !lifted {
		return
	}
	for i := range objs {
		var k need
		switch e := &objs[i]; e.gk {
		case namespaceKind:
			k.namespace = e.name
		case crdKind:
			group, _, _ := unstructured.NestedString(e.obj.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(e.obj.Object, "spec", "names", "kind")
			if kind == "" {
				continue
			}
			k.gk = schema.GroupKind{Group: group, Kind: kind}
		default:
			continue
		}
		if w, ok := first[k]; ok && w < objs[i].wave {
			objs[i].wave = w
		}
	}
}

// kindOrder ranks kinds inside a wave, of hooks and ordinary objects
// alike: Argo CD's order (gitops-engine's sync tasks, after Helm's kind
// sorter), so that a repository written for Argo CD is applied as Argo
// CD applies it. Kinds not listed (custom resources, webhooks) come
// after these.
var kindOrder = rankOf([]string{
	"Namespace",
	"NetworkPolicy",
	"ResourceQuota",
	"LimitRange",
	"PodSecurityPolicy",
	"PodDisruptionBudget",
	"ServiceAccount",
	"Secret",
	"SecretList",
	"ConfigMap",
	"StorageClass",
	"PersistentVolume",
	"PersistentVolumeClaim",
	"CustomResourceDefinition",
	"ClusterRole",
	"ClusterRoleList",
	"ClusterRoleBinding",
	"ClusterRoleBindingList",
	"Role",
	"RoleList",
	"RoleBinding",
	"RoleBindingList",
	"Service",
	"DaemonSet",
	"Pod",
	"ReplicationController",
	"ReplicaSet",
	"Deployment",
	"HorizontalPodAutoscaler",
	"StatefulSet",
	"Job",
	"CronJob",
	"Ingress",
	"APIService",
})

func rankOf(kinds []string) map[string]int {
	m := make(map[string]int, len(kinds))
	for i, k := range kinds {
		m[k] = i
	}
	return m
}

// kindRank is a kind's place in kindOrder; len(kindOrder) for a kind not
// listed. It differs from Argo CD's, which ranks by kind alone, only
// where that would apply an object before what it needs:
//   - a custom resource (its group has a dot and is not Kubernetes'
//     *.k8s.io) with the name of a kind listed up to
//     CustomResourceDefinition (a custom "ConfigMap") ranks as unlisted,
//     never before the CRD defining it, nor before the Namespaces;
//   - admission webhook configurations come after every other kind, as
//     the engine's order has them (sortObjects), so that they cannot
//     refuse the objects of their wave before their server runs.
func kindRank(gk schema.GroupKind) int {
	if gk.Group == "admissionregistration.k8s.io" && strings.HasSuffix(gk.Kind, "WebhookConfiguration") {
		return len(kindOrder) + 1
	}
	r, ok := kindOrder[gk.Kind]
	if !ok || (r <= kindOrder["CustomResourceDefinition"] && customGroup(gk.Group)) {
		return len(kindOrder)
	}
	return r
}

// customGroup reports whether group is one custom resources are served
// in: the API server wants a dot in a CRD's group, and Kubernetes' own
// are single words or end in .k8s.io.
func customGroup(group string) bool {
	return strings.Contains(group, ".") && !strings.HasSuffix(group, ".k8s.io")
}
