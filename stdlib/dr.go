package stdlib

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.starlark.net/starlark"
	"go.starlark.net/starlarkstruct"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// DR is the Starlark module dr: what a standby (disaster recovery)
// cluster should hold of the objects read from a namespace of the primary.
//
//	dr.copy(objects, active=False, namespace=None, strip_node_ports=False) -> list
//	dr.replicas_annotation -> str   # "manifestsync.dev/replicas"
//
// A typical transform reads a whole-namespace object set source and writes
// it to a target in the DR cluster:
//
//	def main(ctx):
//	    return dr.copy(ctx.sources["shop"].objects, active = ctx.params["active"])
var DR = &starlarkstruct.Module{
	Name: "dr",
	Members: starlark.StringDict{
		"copy":                newBuiltin("dr.copy", drCopy),
		"replicas_annotation": starlark.String(ReplicasAnnotation),
	},
}

var drModule = Module{
	Name:  "dr",
	Doc:   "Disaster recovery: turns the objects read from a namespace of a primary cluster into what a standby cluster should hold, workloads scaled to zero with their replica counts kept in an annotation, and back (failover) with one parameter. A pure function of its arguments: re-running it over its own output gives the same objects.",
	Value: DR,
	Funcs: []Func{
		{"copy", "dr.copy(objects, active=False, namespace=None, strip_node_ports=False) -> list", "Returns new copies of objects (a list of dicts), in their order, ready for the standby cluster. " +
			"It drops Jobs (a Job runs once where it is created: in the standby it would run again, and its selector holds a uid the primary's API server generated), " +
			"objects a controller owns (a controller ownerReference: their controller, copied too, makes them again in the standby), " +
			"Secrets of type service-account-token and what the cluster makes in every namespace (ConfigMap kube-root-ca.crt, ServiceAccount default): the standby has its own. " +
			"It strips status, ownerReferences and the metadata the server sets (uid, resourceVersion, generation, creationTimestamp, managedFields, selfLink, deletionTimestamp, deletionGracePeriodSeconds, the last-applied and deployment.kubernetes.io/revision annotations), " +
			"a Service's allocated clusterIP and clusterIPs (a headless Service's None stays), its nodePorts and healthCheckNodePort when strip_node_ports is True, " +
			"and a PersistentVolumeClaim's binding to a volume of the primary (spec.volumeName and the pv.kubernetes.io/ and volume.kubernetes.io/ annotations). " +
			"With active=False (standby), Deployments and StatefulSets get 0 replicas and the annotation manifestsync.dev/replicas holds their count (1 when unset); an object that already carries it keeps it, so copying a copy changes nothing. " +
			"With active=True (failover), replicas are restored from the annotation, which is removed; objects without it keep their count. " +
			"namespace, when given, becomes every object's metadata.namespace. Errors name the object as Kind namespace/name."},
		{"replicas_annotation", "dr.replicas_annotation", `The annotation that keeps a workload's replica count in the standby: "manifestsync.dev/replicas".`},
	},
}

// ReplicasAnnotation keeps, on a Deployment or StatefulSet scaled to zero
// in a standby cluster, the replica count it runs with in the primary.
const ReplicasAnnotation = "manifestsync.dev/replicas"

// DROptions are the parameters of [DRCopy]; the zero value makes a standby
// copy that keeps nodePorts and namespaces.
type DROptions struct {
	// Active restores the replica counts (failover) instead of scaling to 0.
	Active bool
	// Namespace, when set, becomes every object's namespace.
	Namespace string
	// StripNodePorts removes the node ports of Services, for a standby
	// whose node ports are allocated by its own API server.
	StripNodePorts bool
}

func drCopy(thread *starlark.Thread, b *starlark.Builtin, args starlark.Tuple, kwargs []starlark.Tuple) (starlark.Value, error) {
	var (
		objectsV starlark.Value
		opts     DROptions
	)
	if err := starlark.UnpackArgs(b.Name(), args, kwargs, "objects", &objectsV,
		"active?", &opts.Active, "namespace??", &opts.Namespace, "strip_node_ports?", &opts.StripNodePorts); err != nil {
		return nil, err
	}
	objects, err := toList("objects", objectsV) // fresh copies, ours to change
	if err != nil {
		return nil, err
	}
	out, err := DRCopy(objects, opts)
	if err != nil {
		return nil, err
	}
	return lstar.ToValue(out)
}

// DRCopy returns what a standby cluster should hold of objects (JSON-shaped
// maps, which it changes in place): see the dr module's documentation.
func DRCopy(objects []any, opts DROptions) ([]any, error) {
	out := make([]any, 0, len(objects))
	for i, v := range objects {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("objects[%d]: got %s, want dict", i, typeName(v))
		}
		o := &unstructured.Unstructured{Object: m}
		keep, err := drObject(o, opts)
		if err != nil {
			return nil, fmt.Errorf("objects[%d]: %s: %w", i, drName(o), err)
		}
		if keep {
			out = append(out, m)
		}
	}
	return out, nil
}

// drName names o for errors, as "Kind namespace/name".
func drName(o *unstructured.Unstructured) string {
	id := v1alpha1.IDOf(o)
	if id.Kind == "" {
		id.Kind = "object"
	}
	return id.String()
}

// drObject makes o a standby (or active) copy in place; keep is false for
// an object the standby must not hold.
func drObject(o *unstructured.Unstructured, opts DROptions) (keep bool, err error) {
	if err := checkIdentity(o.Object); err != nil {
		return false, err
	}
	if drDropped(o) {
		return false, nil
	}
	md := o.Object["metadata"].(map[string]any) // checkIdentity made sure
	for _, f := range ServerOwnedMetadata {
		delete(md, f)
	}
	delete(o.Object, "status")
	if err := deleteAnnotations(md, func(k string) bool { return serverSetAnnotations[k] }); err != nil {
		return false, err
	}
	if opts.Namespace != "" {
		md["namespace"] = opts.Namespace
	}
	gk := o.GroupVersionKind().GroupKind()
	switch {
	case gk.Group == "apps" && (gk.Kind == "Deployment" || gk.Kind == "StatefulSet"):
		if opts.Active {
			return true, restoreReplicas(o.Object)
		}
		return true, scaleToZero(o.Object)
	case gk.Group == "" && gk.Kind == "Service":
		StripAllocatedIPs(o.Object)
		if opts.StripNodePorts {
			return true, stripNodePorts(o.Object)
		}
	case gk.Group == "" && gk.Kind == "PersistentVolumeClaim":
		unstructured.RemoveNestedField(o.Object, "spec", "volumeName")
		return true, deleteAnnotations(md, isVolumeBinding)
	}
	return true, nil
}

// checkIdentity makes sure obj has a kind, an apiVersion and a name, and a
// metadata dict.
func checkIdentity(obj map[string]any) error {
	for _, f := range []string{"apiVersion", "kind"} {
		if s, ok := obj[f].(string); !ok || s == "" {
			return fmt.Errorf("%s: got %s, want a non-empty string", f, typeName(obj[f]))
		}
	}
	md, ok := obj["metadata"].(map[string]any)
	if !ok {
		return fmt.Errorf("metadata: got %s, want dict", typeName(obj["metadata"]))
	}
	if s, ok := md["name"].(string); !ok || s == "" {
		return fmt.Errorf("metadata.name: got %s, want a non-empty string", typeName(md["name"]))
	}
	return nil
}

// drDropped reports whether the standby must not hold o: see the dr
// module's documentation for why.
func drDropped(o *unstructured.Unstructured) bool {
	gvk := o.GroupVersionKind()
	switch {
	case gvk.Group == "batch" && gvk.Kind == "Job":
		return true
	case gvk.Group == "" && gvk.Kind == "ConfigMap" && o.GetName() == "kube-root-ca.crt",
		gvk.Group == "" && gvk.Kind == "ServiceAccount" && o.GetName() == "default":
		return true
	case gvk.Group == "" && gvk.Kind == "Secret":
		if t, _, _ := unstructured.NestedString(o.Object, "type"); t == "kubernetes.io/service-account-token" {
			return true
		}
	}
	refs, _, _ := unstructured.NestedSlice(o.Object, "metadata", "ownerReferences")
	return slices.ContainsFunc(refs, func(r any) bool {
		ref, _ := r.(map[string]any)
		controller, _ := ref["controller"].(bool)
		return controller
	})
}

// ServerOwnedMetadata is the metadata the API server sets: applying it is
// either an error or a lie. ownerReferences name uids of the cluster the
// object was read from.
var ServerOwnedMetadata = []string{"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "ownerReferences", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"}

// LastAppliedAnnotation is kubectl's copy of what it last applied.
const LastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// serverSetAnnotations are the annotations a cluster sets on what it
// serves, which a copy must not carry.
var serverSetAnnotations = map[string]bool{
	LastAppliedAnnotation:               true,
	"deployment.kubernetes.io/revision": true,
}

// isVolumeBinding reports whether an annotation of a PersistentVolumeClaim
// records its binding to a volume or node of the cluster it was read from.
func isVolumeBinding(key string) bool {
	return strings.HasPrefix(key, "pv.kubernetes.io/") || strings.HasPrefix(key, "volume.kubernetes.io/") ||
		strings.HasPrefix(key, "volume.beta.kubernetes.io/")
}

// deleteAnnotations removes the annotations drop picks from md, and the
// annotations map when it ends empty.
func deleteAnnotations(md map[string]any, drop func(string) bool) error {
	v, ok := md["annotations"]
	if !ok || v == nil {
		return nil
	}
	ann, ok := v.(map[string]any)
	if !ok {
		return fmt.Errorf("metadata.annotations: got %s, want dict", typeName(v))
	}
	for k := range ann {
		if drop(k) {
			delete(ann, k)
		}
	}
	if len(ann) == 0 {
		delete(md, "annotations")
	}
	return nil
}

// replicas reads spec.replicas of a workload: 1 when unset, as the API
// server defaults it.
func replicas(obj map[string]any) (int64, error) {
	v, found, err := unstructured.NestedFieldNoCopy(obj, "spec", "replicas")
	if err != nil {
		return 0, fmt.Errorf("spec: %w", err)
	}
	if !found || v == nil {
		return 1, nil
	}
	n, ok := v.(int64)
	if !ok || n < 0 {
		return 0, fmt.Errorf("spec.replicas: got %v (%s), want a count", v, typeName(v))
	}
	return n, nil
}

// keptReplicas reads the replica count kept in the annotation; found is
// false when the object carries none.
func keptReplicas(obj map[string]any) (n int64, found bool, err error) {
	s, found, err := unstructured.NestedString(obj, "metadata", "annotations", ReplicasAnnotation)
	if err != nil {
		return 0, false, fmt.Errorf("metadata.annotations[%q]: %w", ReplicasAnnotation, err)
	}
	if !found {
		return 0, false, nil
	}
	n, err = strconv.ParseInt(s, 10, 32)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("metadata.annotations[%q]: %q is not a replica count", ReplicasAnnotation, s)
	}
	return n, true, nil
}

// scaleToZero sets a workload's replicas to 0, keeping its count in the
// annotation unless it carries one already (a copy of a copy).
func scaleToZero(obj map[string]any) error {
	_, kept, err := keptReplicas(obj)
	if err != nil {
		return err
	}
	if !kept {
		n, err := replicas(obj)
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(obj, strconv.FormatInt(n, 10), "metadata", "annotations", ReplicasAnnotation); err != nil {
			return fmt.Errorf("metadata.annotations: %w", err)
		}
	}
	if err := unstructured.SetNestedField(obj, int64(0), "spec", "replicas"); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	return nil
}

// restoreReplicas gives a workload back the count kept in the annotation,
// and removes it; a workload without one keeps its replicas.
func restoreReplicas(obj map[string]any) error {
	if _, err := replicas(obj); err != nil {
		return err
	}
	n, kept, err := keptReplicas(obj)
	if err != nil || !kept {
		return err
	}
	if err := unstructured.SetNestedField(obj, n, "spec", "replicas"); err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	md := obj["metadata"].(map[string]any)
	return deleteAnnotations(md, func(k string) bool { return k == ReplicasAnnotation })
}

// headless is the clusterIP of a Service that asks for none.
const headless = "None"

// StripAllocatedIPs removes the cluster IPs a Service (a JSON-shaped map)
// exported from a live cluster carries: the API server allocated them, and
// applying them elsewhere would ask for addresses that are taken or out of
// range. A headless Service's "None" is the user's choice, not an
// allocation: it stays, or the Service would be created with an address.
func StripAllocatedIPs(obj map[string]any) {
	if ip, _, _ := unstructured.NestedString(obj, "spec", "clusterIP"); ip != headless {
		unstructured.RemoveNestedField(obj, "spec", "clusterIP")
	}
	ips, _, _ := unstructured.NestedStringSlice(obj, "spec", "clusterIPs")
	if len(ips) == 0 || slices.ContainsFunc(ips, func(ip string) bool { return ip != headless }) {
		unstructured.RemoveNestedField(obj, "spec", "clusterIPs")
	}
}

// stripNodePorts removes the node ports a Service's API server allocated.
func stripNodePorts(obj map[string]any) error {
	unstructured.RemoveNestedField(obj, "spec", "healthCheckNodePort")
	ports, found, err := unstructured.NestedFieldNoCopy(obj, "spec", "ports")
	if err != nil || !found || ports == nil {
		return err
	}
	list, ok := ports.([]any)
	if !ok {
		return fmt.Errorf("spec.ports: got %s, want list", typeName(ports))
	}
	for i, p := range list {
		port, ok := p.(map[string]any)
		if !ok {
			return fmt.Errorf("spec.ports[%d]: got %s, want dict", i, typeName(p))
		}
		delete(port, "nodePort")
	}
	return nil
}
