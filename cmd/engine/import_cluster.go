package main

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/manifestsync/manifestsync/engine/importer"
)

// importKinds are the kinds engine import lists from a cluster.
var importKinds = []schema.GroupKind{
	{Group: "source.toolkit.fluxcd.io", Kind: "GitRepository"},
	{Group: "source.toolkit.fluxcd.io", Kind: "OCIRepository"},
	{Group: "source.toolkit.fluxcd.io", Kind: "HelmRepository"},
	{Group: "source.toolkit.fluxcd.io", Kind: "HelmChart"},
	{Group: "source.toolkit.fluxcd.io", Kind: "Bucket"},
	{Group: "kustomize.toolkit.fluxcd.io", Kind: "Kustomization"},
	{Group: "helm.toolkit.fluxcd.io", Kind: "HelmRelease"},
	{Group: "argoproj.io", Kind: "Application"},
	{Group: "argoproj.io", Kind: "ApplicationSet"},
}

// Bounds of a listing: objects per page, and in all.
const (
	importPage     = 500
	importMaxItems = 10000
)

// argoClusterLabel marks Argo CD's cluster Secrets.
const argoClusterLabel = "argocd.argoproj.io/secret-type=cluster"

// restConfig is the client configuration of the flags, and the namespace
// they name (the context's when -n is not given).
func (f *clusterFlags) restConfig(cmd string) (*rest.Config, string, error) {
	rules, err := kubeconfigRules(cmd, f.kubeconfig)
	if err != nil {
		return nil, "", err
	}
	kc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: f.context})
	cfg, err := kc.ClientConfig()
	if err != nil {
		return nil, "", kubeconfigErr(cmd, err)
	}
	cfg.Timeout = f.timeout
	cfg.UserAgent = programName + "-" + cmd + "/" + buildVersion()
	ns := f.namespace
	if ns == "" {
		if ns, _, err = kc.Namespace(); err != nil {
			return nil, "", kubeconfigErr(cmd, err)
		}
	}
	return cfg, ns, nil
}

// listFluxArgo lists the Flux and Argo CD objects of the namespace of the
// flags (every namespace with all), each kind at the version the API
// server prefers; a kind the cluster does not have is skipped. Argo CD's
// cluster Secrets are listed as metadata only: their names and labels,
// never their data.
func listFluxArgo(ctx context.Context, f *clusterFlags, all bool) ([]importer.Object, error) {
	cfg, ns, err := f.restConfig("import")
	if err != nil {
		return nil, err
	}
	if all {
		ns = metav1.NamespaceAll
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, usageErr("import: connecting to %s: %w", cfg.Host, err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, usageErr("import: connecting to %s: %w", cfg.Host, err)
	}
	var out []importer.Object
	for _, gk := range importKinds {
		m, err := mapper.RESTMapping(gk)
		if meta.IsNoMatchError(err) {
			continue
		}
		if err != nil {
			return nil, usageErr("import: %s: %w", gk, err)
		}
		opts := metav1.ListOptions{Limit: importPage}
		for {
			list, err := dyn.Resource(m.Resource).Namespace(ns).List(ctx, opts)
			if err != nil {
				return nil, usageErr("import: listing %s: %w", m.Resource.GroupResource(), err)
			}
			for _, item := range list.Items {
				out = append(out, importer.Object{Content: listed(item.Object)})
			}
			if len(out) > importMaxItems {
				return nil, usageErr("import: more than %d objects in the cluster: give -n NS", importMaxItems)
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
	}
	secrets, err := argoClusterSecrets(ctx, cfg, ns)
	if err != nil {
		return nil, err
	}
	out = append(out, secrets...)
	sortedObjects(out)
	return out, nil
}

// argoClusterSecrets lists the metadata of Argo CD's cluster Secrets.
func argoClusterSecrets(ctx context.Context, cfg *rest.Config, ns string) ([]importer.Object, error) {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, usageErr("import: connecting to %s: %w", cfg.Host, err)
	}
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	list, err := mc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: argoClusterLabel, Limit: importPage})
	if err != nil {
		return nil, usageErr("import: listing Argo CD's cluster Secrets (names and labels only): %w", err)
	}
	var out []importer.Object
	for _, s := range list.Items {
		m := map[string]any{"name": s.Name, "namespace": s.Namespace}
		if len(s.Labels) > 0 {
			m["labels"] = stringsAny(s.Labels)
		}
		if len(s.Annotations) > 0 {
			m["annotations"] = stringsAny(s.Annotations)
		}
		out = append(out, importer.Object{Content: map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": m}})
	}
	return out, nil
}

// listed keeps of a listed object what a file of it would hold: its
// apiVersion, kind, spec and the metadata the user wrote (name,
// namespace, labels, annotations, finalizers), not its status nor what
// the API server set.
func listed(obj map[string]any) map[string]any {
	out := map[string]any{"apiVersion": obj["apiVersion"], "kind": obj["kind"]}
	if spec, ok := obj["spec"]; ok {
		out["spec"] = spec
	}
	meta, _ := obj["metadata"].(map[string]any)
	m := map[string]any{}
	for _, k := range []string{"name", "namespace", "labels", "annotations", "finalizers"} {
		if v, ok := meta[k]; ok {
			m[k] = v
		}
	}
	if ann, ok := m["annotations"].(map[string]any); ok {
		delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
		if len(ann) == 0 {
			delete(m, "annotations")
		}
	}
	out["metadata"] = m
	return out
}

func stringsAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
