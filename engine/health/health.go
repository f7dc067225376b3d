// Package health judges the health of applied objects: kstatus
// (sigs.k8s.io/cli-utils) for the kinds it knows and for every object
// that follows the Kubernetes conventions of conditions, and the CEL
// expressions of spec.healthChecks for the kinds it cannot judge.
//
// It takes objects and returns data; it must not import client-go,
// controller-runtime or net/http (the engine imports it to validate
// spec.healthChecks offline).
package health

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Status is the health of one object, as kstatus names it.
type Status = kstatus.Status

// The statuses of an object.
const (
	Current    = kstatus.CurrentStatus
	InProgress = kstatus.InProgressStatus
	Failed     = kstatus.FailedStatus
	// Terminating is an object being deleted; it counts as in progress.
	Terminating = kstatus.TerminatingStatus
	NotFound    = kstatus.NotFoundStatus
	Unknown     = kstatus.UnknownStatus
)

// Result is the health of one object and why.
type Result struct {
	Status  Status
	Message string
}

// Checker judges objects: by the health check of their apiVersion and
// kind when spec.healthChecks has one, else by kstatus.
type Checker struct {
	rules map[schema.GroupVersionKind]*rule
}

// New compiles spec.healthChecks. Its errors name the field that is
// wrong (spec.healthChecks[i].current); a Checker is returned either way,
// without the checks that failed.
func New(checks []v1alpha1.HealthCheck) (*Checker, FieldErrors) {
	c := &Checker{rules: map[schema.GroupVersionKind]*rule{}}
	var errs FieldErrors
	for i, hc := range checks {
		f := fmt.Sprintf("spec.healthChecks[%d]", i)
		gv, err := schema.ParseGroupVersion(hc.APIVersion)
		switch {
		case err != nil || hc.APIVersion == "":
			errs = append(errs, &FieldError{Field: f + ".apiVersion", Msg: fmt.Sprintf("%q is not a group/version", hc.APIVersion)})
			continue
		case hc.Kind == "":
			errs = append(errs, &FieldError{Field: f + ".kind", Msg: "must be set"})
			continue
		}
		gvk := gv.WithKind(hc.Kind)
		if j, dup := c.index(gvk); dup {
			errs = append(errs, &FieldError{Field: f, Msg: fmt.Sprintf("%s %s is checked by spec.healthChecks[%d] already", hc.APIVersion, hc.Kind, j)})
			continue
		}
		r, ferrs := compileRule(f, i, hc)
		if len(ferrs) > 0 {
			errs = append(errs, ferrs...)
			continue
		}
		c.rules[gvk] = r
	}
	return c, errs
}

func (c *Checker) index(gvk schema.GroupVersionKind) (int, bool) {
	if r, ok := c.rules[gvk]; ok {
		return r.index, true
	}
	return 0, false
}

// HasRule reports whether spec.healthChecks judges the kind.
func (c *Checker) HasRule(gvk schema.GroupVersionKind) bool {
	_, ok := c.index(gvk)
	return ok
}

// Check judges obj, as the API server returned it. nil is an object that
// is not found.
func (c *Checker) Check(obj *unstructured.Unstructured) Result {
	if obj == nil || obj.GetDeletionTimestamp() != nil {
		return CheckPresence(obj != nil, true)
	}
	if r := c.rules[obj.GroupVersionKind()]; r != nil {
		return r.check(obj)
	}
	if !c.NeedsObject(obj.GroupVersionKind()) {
		return CheckPresence(true, false)
	}
	if Custom(obj.GroupVersionKind()) && !hasStatus(obj) {
		return Result{Status: Unknown, Message: "no status, and no spec.healthChecks rule for its kind"}
	}
	res, err := kstatus.Compute(obj)
	if err != nil {
		return Result{Status: Unknown, Message: err.Error()}
	}
	return Result{Status: res.Status, Message: message(res)}
}

// CheckPresence judges an object by what its metadata tells: whether it
// exists and whether it is being deleted. It is the whole judgement of the
// kinds whose objects NeedsObject does not need: kstatus would say the
// same after converting the whole object.
func CheckPresence(found, deleting bool) Result {
	switch {
	case !found:
		return Result{Status: NotFound, Message: "not found"}
	case deleting:
		return Result{Status: Terminating, Message: "being deleted"}
	}
	return Result{Status: Current, Message: "exists"}
}

// message is kstatus's reason for a status, with the object's own words
// when it gave some: "ProgressDeadlineExceeded: ReplicaSet "api-5d4" has
// timed out progressing.".
func message(res *kstatus.Result) string {
	for _, c := range res.Conditions {
		msg := c.Message
		if msg == "" {
			msg = res.Message
		}
		if c.Reason != "" {
			return c.Reason + ": " + msg
		}
		return msg
	}
	return res.Message
}

// NeedsObject reports whether judging an object of the kind needs more
// than its metadata: its status or its spec. The kinds that do not are
// Current once they exist (ConfigMaps, RBAC, ...), so that the operator
// watches only the metadata of those.
func (c *Checker) NeedsObject(gvk schema.GroupVersionKind) bool {
	if c.HasRule(gvk) {
		return true
	}
	return !statusless[gvk.GroupKind()]
}

// statusless are the built-in kinds that have no status to judge:
// kstatus finds them Current as soon as they exist.
var statusless = map[schema.GroupKind]bool{}

func init() {
	for _, gk := range []string{
		"ConfigMap", "Secret", "ServiceAccount", "Endpoints", "LimitRange", "PodTemplate",
		"rbac.authorization.k8s.io/Role", "rbac.authorization.k8s.io/RoleBinding",
		"rbac.authorization.k8s.io/ClusterRole", "rbac.authorization.k8s.io/ClusterRoleBinding",
		"networking.k8s.io/NetworkPolicy", "networking.k8s.io/IngressClass",
		"scheduling.k8s.io/PriorityClass", "storage.k8s.io/StorageClass",
		"discovery.k8s.io/EndpointSlice", "coordination.k8s.io/Lease", "node.k8s.io/RuntimeClass",
		"admissionregistration.k8s.io/ValidatingWebhookConfiguration",
		"admissionregistration.k8s.io/MutatingWebhookConfiguration",
		"batch/CronJob",
	} {
		group, kind, ok := strings.Cut(gk, "/")
		if !ok {
			group, kind = "", gk
		}
		statusless[schema.GroupKind{Group: group, Kind: kind}] = true
	}
}

// kubernetesGroups are the API groups of Kubernetes itself; every other
// group with a dot is of a custom resource (or an aggregated API).
var kubernetesGroups = map[string]bool{
	"admissionregistration.k8s.io": true, "apiextensions.k8s.io": true, "apiregistration.k8s.io": true,
	"authentication.k8s.io": true, "authorization.k8s.io": true, "certificates.k8s.io": true,
	"coordination.k8s.io": true, "discovery.k8s.io": true, "events.k8s.io": true,
	"flowcontrol.apiserver.k8s.io": true, "internal.apiserver.k8s.io": true, "networking.k8s.io": true,
	"node.k8s.io": true, "rbac.authorization.k8s.io": true, "resource.k8s.io": true,
	"scheduling.k8s.io": true, "storage.k8s.io": true, "storagemigration.k8s.io": true,
}

// Custom reports whether the kind is not one of Kubernetes's own: its
// status follows no rule kstatus knows, so an object of it without a
// status cannot be judged.
func Custom(gvk schema.GroupVersionKind) bool {
	return strings.Contains(gvk.Group, ".") && !kubernetesGroups[gvk.Group]
}

func hasStatus(obj *unstructured.Unstructured) bool {
	s, ok := obj.Object["status"].(map[string]any)
	return ok && len(s) > 0
}

// Aggregate is the health of a target from that of its objects: Degraded
// when one failed, else Progressing when one is still in progress, else
// Unknown when one cannot be judged, else Healthy.
func Aggregate(results []Result) v1alpha1.Health {
	var progressing, unknown bool
	for _, r := range results {
		switch r.Status {
		case Current:
		case Failed:
			return v1alpha1.HealthDegraded
		case InProgress, Terminating:
			progressing = true
		default:
			unknown = true
		}
	}
	switch {
	case progressing:
		return v1alpha1.HealthProgressing
	case unknown:
		return v1alpha1.HealthUnknown
	}
	return v1alpha1.HealthHealthy
}

// FieldError is a health check that does not compile.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// FieldErrors are the errors of spec.healthChecks.
type FieldErrors []*FieldError
