package controller

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// Who writes through the gate: a ManifestSync of a namespace that is not
// trusted and runs as no service account. The zero Options trust no
// namespace, so that a reconciler made without thought is gated.
func TestGatedModes(t *testing.T) {
	sync := func(ns, account string) *v1alpha1.ManifestSync {
		return &v1alpha1.ManifestSync{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "app"},
			Spec: v1alpha1.ManifestSyncSpec{ServiceAccountName: account}}
	}
	for _, c := range []struct {
		name        string
		opts        Options
		ms          *v1alpha1.ManifestSync
		wantAccount string
		wantGated   bool
	}{
		{"zero options: gated", Options{}, sync("team-a", ""), "", true},
		{"own account", Options{}, sync("team-a", "deployer"), "deployer", false},
		{"trusted namespace", Options{TrustedNamespaces: []string{"platform"}}, sync("platform", ""), "", false},
		{"another namespace than the trusted", Options{TrustedNamespaces: []string{"platform"}}, sync("team-a", ""), "", true},
		{"every namespace trusted", Options{TrustedNamespaces: []string{"*"}}, sync("team-a", ""), "", false},
		{"default account", Options{DefaultServiceAccount: "tenant"}, sync("team-a", ""), "tenant", false},
		{"own account over the default", Options{DefaultServiceAccount: "tenant"}, sync("team-a", "deployer"), "deployer", false},
		{"trusted runs as the operator despite the default account",
			Options{TrustedNamespaces: []string{"platform"}, DefaultServiceAccount: "tenant"}, sync("platform", ""), "", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := c.opts.serviceAccount(c.ms); got != c.wantAccount {
				t.Errorf("serviceAccount = %q, want %q", got, c.wantAccount)
			}
			if got := c.opts.gated(c.ms); got != c.wantGated {
				t.Errorf("gated = %v, want %v", got, c.wantGated)
			}
		})
	}
}

// A hostile annotation value does not widen what it allows: only a whole
// entry naming the namespace, or "*", allows it.
// A refusal names the reason, each refused object, and says nothing was
// applied; a sync whose only failures are refusals waits (no quick retry),
// one with another failure is retried as before.
func TestNotAllowedOutcomes(t *testing.T) {
	na := &notAllowedError{Reasons: []string{`Secret kube-system/x: namespace "kube-system" does not allow writes from "team-a" (annotation manifestsync.dev/allow-from)`}}
	msg := fmt.Errorf("target %q: %w", "t", na).Error()
	for _, want := range []string{v1alpha1.ReasonTargetNotAllowed + ": ", "Secret kube-system/x", AllowFromAnnotation, "nothing of the target was applied"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	target := &engine.TargetResult{Name: "t"}
	refused := &targetOutcome{target: target, err: fmt.Errorf("target %q: %w", "t", na)}
	synced := &targetOutcome{target: target}
	failed := &targetOutcome{target: target, err: errors.New("target \"t\": forbidden")}
	if !refusedOnly([]*targetOutcome{refused, synced}) {
		t.Error("refused and synced targets: refusedOnly = false")
	}
	if refusedOnly([]*targetOutcome{refused, failed}) {
		t.Error("a target failed otherwise: refusedOnly = true, the failure would not be retried soon")
	}
	if refusedOnly([]*targetOutcome{synced}) {
		t.Error("nothing refused: refusedOnly = true")
	}
}
