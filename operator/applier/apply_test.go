package applier

import (
	"errors"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

func TestPolicyAnnotation(t *testing.T) {
	a := &Manager{Policy: v1alpha1.PolicyAdopt}
	obj := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{}}}
	if p, _ := a.policyOf(obj); p != v1alpha1.PolicyAdopt {
		t.Errorf("default: %s", p)
	}
	obj.SetAnnotations(map[string]string{PolicyAnnotation: "Keep"})
	if p, _ := a.policyOf(obj); p != v1alpha1.PolicyKeep {
		t.Errorf("annotation: %s", p)
	}
	obj.SetAnnotations(map[string]string{PolicyAnnotation: "keep"})
	if _, err := a.policyOf(obj); err == nil {
		t.Error("a bad annotation is accepted")
	}
}

func TestImmutable(t *testing.T) {
	if immutable(errors.New("field is immutable")) {
		t.Error("a plain error is an API error")
	}
}
