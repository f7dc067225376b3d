package w11

import (
	"context"
	"crypto/sha1" //nolint:gosec // a git commit id, not security
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/bench/harness"
)

// The fleet the UI shows: syncs ManifestSyncs spread over namespaces, each
// with the status an operator would have written after syncing one git
// path to one target (conditions, a target row, an inventory of five
// objects, a history), written through the status subresource by the
// benchmark itself: no operator runs, so that the UI server is all that
// reads and the figures are its own.
const (
	syncs      = 1000
	namespaces = 20
	// inventory objects per ManifestSync, and history entries.
	objectsPer = 5
	historyLen = 5
	setupWork  = 16
)

func nsName(i int) string { return fmt.Sprintf("bench-w11-%02d", i%namespaces) }

func msName(i int) string { return fmt.Sprintf("app-%04d", i) }

// The states of the fleet, by index: most are Ready and Healthy; a few of
// each other state, as a platform team's overview shows them.
func suspended(i int) bool   { return i%50 == 7 }
func failed(i int) bool      { return i%20 == 3 }
func progressing(i int) bool { return i%20 == 5 }
func degraded(i int) bool    { return i%20 == 9 }
func drifted(i int) bool     { return i%25 == 11 }

// hexOf is a stable hex digest of parts, as long as the hash makes it.
func hexOf(sum func([]byte) []byte, parts ...any) string {
	return hex.EncodeToString(sum([]byte(fmt.Sprint(parts...))))
}

func sha1Of(parts ...any) string {
	return hexOf(func(b []byte) []byte { s := sha1.Sum(b); return s[:] }, parts...) //nolint:gosec // a commit id
}

func sha256Of(parts ...any) string {
	return "sha256:" + hexOf(func(b []byte) []byte { s := sha256.Sum256(b); return s[:] }, parts...)
}

// manifestSync is the i-th ManifestSync of the fleet, without status.
func manifestSync(i int) *v1alpha1.ManifestSync {
	ns := nsName(i)
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: msName(i), Labels: map[string]string{"app.kubernetes.io/part-of": "bench-w11"}},
		Spec: v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{
				URL:  fmt.Sprintf("https://github.com/example/team-%02d", i%namespaces),
				Ref:  v1alpha1.GitRef{Branch: "main"},
				Path: "apps/" + msName(i),
			}}},
			Targets: []v1alpha1.Target{{Name: "prod", Namespace: ns}},
			Suspend: suspended(i),
		},
	}
}

// status is the status of the i-th ManifestSync at generation gen, as of
// now: the operator's form of it (see operator/controller/status.go).
func status(i int, gen int64, now time.Time) v1alpha1.ManifestSyncStatus {
	ns, name := nsName(i), msName(i)
	at := func(ago time.Duration) metav1.Time { return metav1.NewTime(now.Add(-ago).Truncate(time.Second)) }
	last := at(time.Duration(i%240) * time.Minute)

	history := make([]v1alpha1.HistoryEntry, historyLen)
	for h := range history {
		commit := sha1Of("w11", i, h)
		history[h] = v1alpha1.HistoryEntry{
			Revision:     sha256Of("rev", i, h),
			Inputs:       &v1alpha1.Inputs{Sources: map[string]string{"repo": "main@sha1:" + commit}},
			OutputDigest: sha256Of("out", i, h),
			Time:         at(time.Duration(i%240)*time.Minute + time.Duration(h)*6*time.Hour),
			Result:       v1alpha1.ReasonSynced,
		}
	}
	rev := history[0].Revision

	ready := metav1.Condition{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: gen, LastTransitionTime: last,
		Reason: v1alpha1.ReasonSynced, Message: fmt.Sprintf("applied %d objects to 1 target", objectsPer)}
	healthy := metav1.Condition{Type: v1alpha1.ConditionHealthy, Status: metav1.ConditionTrue, ObservedGeneration: gen, LastTransitionTime: last,
		Reason: "Current", Message: fmt.Sprintf("all %d objects are Current", objectsPer)}
	target := v1alpha1.TargetStatus{Name: "prod", Namespace: ns, State: v1alpha1.TargetSynced, Objects: objectsPer, LastSyncTime: &last, Health: v1alpha1.HealthHealthy}
	switch {
	case failed(i):
		ready.Status, ready.Reason = metav1.ConditionFalse, v1alpha1.ReasonApplyFailed
		ready.Message = fmt.Sprintf("target prod: Deployment %s/%s: admission webhook \"policy.example.com\" denied the request: image tag latest is not allowed", ns, name)
		target.State, target.Message = v1alpha1.TargetFailed, ready.Message
		history[0].Result = v1alpha1.ReasonApplyFailed
	case progressing(i):
		healthy.Status, healthy.Reason = metav1.ConditionFalse, v1alpha1.ReasonProgressing
		healthy.Message = fmt.Sprintf("Deployment %s/%s: 1 of 2 updated replicas are available", ns, name)
		target.Health = v1alpha1.HealthProgressing
	case degraded(i):
		healthy.Status, healthy.Reason = metav1.ConditionFalse, v1alpha1.ReasonHealthCheckFailed
		healthy.Message = fmt.Sprintf("Deployment %s/%s: Progress deadline exceeded", ns, name)
		target.Health = v1alpha1.HealthDegraded
	}
	kinds := []struct{ suffix, group, kind, version string }{
		{"-config", "", "ConfigMap", "v1"},
		{"", "", "ServiceAccount", "v1"},
		{"", "", "Service", "v1"},
		{"", "apps", "Deployment", "v1"},
		{"", "autoscaling", "HorizontalPodAutoscaler", "v2"},
	}
	inventory := make([]v1alpha1.InventoryEntry, 0, objectsPer)
	for k, o := range kinds[:objectsPer] {
		id := v1alpha1.ObjectID{Group: o.group, Kind: o.kind, Namespace: ns, Name: name + o.suffix}
		inventory = append(inventory, v1alpha1.InventoryEntry{ID: id.InventoryID(), Version: o.version, Target: "prod",
			Fields: sha256Of("fields", i, k), Drifted: k == 0 && drifted(i)})
	}
	synced := 0
	if target.State == v1alpha1.TargetSynced {
		synced = 1
	}
	return v1alpha1.ManifestSyncStatus{
		ObservedGeneration: gen,
		Conditions: []metav1.Condition{ready, healthy,
			{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionFalse, ObservedGeneration: gen, LastTransitionTime: last, Reason: ready.Reason, Message: ready.Message},
			{Type: v1alpha1.ConditionStalled, Status: metav1.ConditionFalse, ObservedGeneration: gen, LastTransitionTime: last, Reason: ready.Reason, Message: ready.Message},
		},
		LastEvaluatedRevision:  rev,
		LastAppliedRevision:    rev,
		ShortRevision:          v1alpha1.ShortRevision(rev),
		TargetsSummary:         fmt.Sprintf("%d/1", synced),
		Inputs:                 history[0].Inputs.DeepCopy(),
		Targets:                []v1alpha1.TargetStatus{target},
		Inventory:              inventory,
		History:                history,
		LastSuccessfulSyncTime: &last,
	}
}

// populate creates the namespaces and the first n ManifestSyncs of the
// fleet, each ManifestSync then its status.
func populate(ctx context.Context, c client.Client, n int) error {
	for i := range namespaces {
		err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsName(i)}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", nsName(i), err)
		}
	}
	now := time.Now()
	return harness.Parallel(n, setupWork, func(i int) error {
		ms := manifestSync(i)
		if err := c.Create(ctx, ms); err != nil {
			return fmt.Errorf("creating ManifestSync %s/%s: %w", ms.Namespace, ms.Name, err)
		}
		ms.Status = status(i, ms.Generation, now)
		if err := c.Status().Update(ctx, ms); err != nil {
			return fmt.Errorf("writing the status of ManifestSync %s/%s: %w", ms.Namespace, ms.Name, err)
		}
		return nil
	})
}

// touch writes a new status of the i-th ManifestSync (its Ready
// condition's message changes, as after a resync): the one change the
// event streams must all report.
func touch(ctx context.Context, c client.Client, i int, round int) error {
	ms := &v1alpha1.ManifestSync{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsName(i), Name: msName(i)}, ms); err != nil {
		return fmt.Errorf("reading ManifestSync %s/%s: %w", nsName(i), msName(i), err)
	}
	for k := range ms.Status.Conditions {
		if ms.Status.Conditions[k].Type == v1alpha1.ConditionReady {
			ms.Status.Conditions[k].Message = fmt.Sprintf("applied %d objects to 1 target (resync %d)", objectsPer, round)
		}
	}
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	ms.Status.LastSuccessfulSyncTime = &now
	if err := c.Status().Update(ctx, ms); err != nil {
		return fmt.Errorf("writing the status of ManifestSync %s/%s: %w", ms.Namespace, ms.Name, err)
	}
	return nil
}
