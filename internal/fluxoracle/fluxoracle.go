// Package fluxoracle renders a path as Flux's kustomize-controller would
// apply it, with Flux's own library (github.com/fluxcd/pkg/kustomize):
// its kustomize build, then its post-build substitution reading
// substituteFrom through a client. Tests compare ManifestSync's rendering
// of Flux repositories with it; nothing else may import it.
package fluxoracle

import (
	"context"
	"fmt"

	fluxkustomize "github.com/fluxcd/pkg/kustomize"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Render builds dir (on disk) and substitutes each object as a Flux
// Kustomization of namespace would with postBuild.substituteFrom naming
// objs in order (*corev1.ConfigMap and *corev1.Secret), read through a
// client. It returns
// each object as Flux applies it, in YAML (sigs.k8s.io/yaml), by
// "Kind/name".
func Render(dir, namespace string, objs ...client.Object) (map[string]string, error) {
	rm, err := fluxkustomize.Build(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("flux build %s: %w", dir, err)
	}
	var from []any
	for _, o := range objs {
		kind := "ConfigMap"
		if _, ok := o.(*corev1.Secret); ok {
			kind = "Secret"
		}
		from = append(from, map[string]any{"kind": kind, "name": o.GetName()})
	}
	ks := unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "oracle", "namespace": namespace},
		"spec":     map[string]any{"postBuild": map[string]any{"substituteFrom": from}},
	}}
	c := fake.NewClientBuilder().WithObjects(objs...).Build()
	out := map[string]string{}
	for _, res := range rm.Resources() {
		sub, err := fluxkustomize.SubstituteVariables(context.Background(), c, ks, res)
		if err != nil {
			return nil, fmt.Errorf("flux substitution of %s: %w", res.CurId(), err)
		}
		if sub == nil { // disabled: applied as built
			sub = res
		}
		y, err := sub.AsYAML()
		if err != nil {
			return nil, err
		}
		out[sub.GetKind()+"/"+sub.GetName()] = string(y)
	}
	return out, nil
}
