package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// Eventually calls cond every 50ms until it returns nil, and fails the test
// with its last error once within has passed.
func Eventually(t testing.TB, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Gone returns nil once obj no longer exists, and otherwise says that it
// does (or why it cannot tell).
func (e *Env) Gone(obj client.Object) error {
	err := e.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	return fmt.Errorf("%T %s/%s still exists", obj, obj.GetNamespace(), obj.GetName())
}

// WaitForReason waits, at most within, until the Ready condition of the
// ManifestSync key has the reason for its current generation, and returns
// the ManifestSync.
func (e *Env) WaitForReason(t testing.TB, key client.ObjectKey, reason string, within time.Duration) *v1alpha1.ManifestSync {
	t.Helper()
	cur := &v1alpha1.ManifestSync{}
	Eventually(t, within, func() error {
		if err := e.Client.Get(context.Background(), key, cur); err != nil {
			return err
		}
		c := apimeta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case c == nil:
			return errors.New("no Ready condition")
		case c.ObservedGeneration != cur.Generation:
			return fmt.Errorf("Ready is of generation %d, want %d", c.ObservedGeneration, cur.Generation)
		case c.Reason != reason:
			return fmt.Errorf("Ready is %s (%s): %s; want %s", c.Status, c.Reason, c.Message, reason)
		}
		return nil
	})
	return cur
}

// CreateSync creates ms and, when the test ends, deletes it and waits, at
// most within, until an operator has finalized it, so that no test's
// operator work runs into the next test. The operator must still run then
// (cleanups run last-in first-out).
func (e *Env) CreateSync(t testing.TB, ms *v1alpha1.ManifestSync, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	if err := e.Client.Create(ctx, ms); err != nil {
		t.Fatalf("creating ManifestSync: %v", err)
	}
	key := client.ObjectKeyFromObject(ms)
	t.Cleanup(func() {
		obj := &v1alpha1.ManifestSync{}
		obj.Namespace, obj.Name = key.Namespace, key.Name
		if err := e.Client.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting ManifestSync: %v", err)
			return
		}
		Eventually(t, within, func() error { return e.Gone(obj) })
	})
}

// FieldManagers are the managers of obj's fields, sorted, each once.
func FieldManagers(obj metav1.Object) []string {
	var out []string
	for _, e := range obj.GetManagedFields() {
		out = append(out, e.Manager)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// StartManager runs mgr with ctx, whose cancel is given, and returns once
// its cache has synced; stop cancels ctx and waits until mgr has stopped.
// It is how a test package's TestMain runs its operator.
func StartManager(ctx context.Context, cancel context.CancelFunc, mgr manager.Manager) (stop func(), err error) {
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		cancel()
		return nil, errors.Join(errors.New("the manager's cache did not sync"), <-done)
	}
	return func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(os.Stderr, "the manager stopped with: %v\n", err)
		}
	}, nil
}
