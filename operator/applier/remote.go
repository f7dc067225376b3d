package applier

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

// A target of another cluster (spec.targets[].cluster) is reached with
// the kubeconfig a Secret of the ManifestSync's namespace holds.

// DefaultKubeConfigKey is the key of a kubeConfigSecretRef without one.
const DefaultKubeConfigKey = "value"

// KubeConfigRef is a kubeconfig: a key of a Secret.
type KubeConfigRef struct{ Namespace, Name, Key string }

func (k KubeConfigRef) String() string { return k.Namespace + "/" + k.Name + "/" + k.Key }

// KubeConfigOf is the kubeconfig a Secret key of ms's namespace holds.
func KubeConfigOf(ms *v1alpha1.ManifestSync, ref v1alpha1.SecretKeyReference) KubeConfigRef {
	key := ref.Key
	if key == "" {
		key = DefaultKubeConfigKey
	}
	return KubeConfigRef{Namespace: ms.Namespace, Name: ref.Name, Key: key}
}

// ErrKubeconfigExec refuses a kubeconfig with a credential plugin.
var ErrKubeconfigExec = errors.New("the kubeconfig gets its credentials from a plugin (users[].user.exec or auth-provider), " +
	"which would run a command the Secret names on the operator's machine, with the operator's rights; " +
	"the operator runs those only with --allow-kubeconfig-exec")

// KubeConfigREST is the config of a kubeconfig a Secret holds: it may not
// name files, nor run programs unless allowExec: those would run, or read,
// on the operator's machine with the operator's rights.
func KubeConfigREST(kubeconfig []byte, allowExec bool) (*rest.Config, error) {
	if len(kubeconfig) == 0 {
		return nil, errors.New("no kubeconfig")
	}
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	switch {
	case (cfg.ExecProvider != nil || cfg.AuthProvider != nil) && !allowExec:
		return nil, ErrKubeconfigExec
	case cfg.CertFile != "", cfg.KeyFile != "", cfg.CAFile != "", cfg.BearerTokenFile != "":
		return nil, errors.New("kubeconfig names files; only inline credentials and certificates are allowed")
	}
	return cfg, nil
}

// RemoteClientAs is the client of the cluster of a target of ms
// (c.kubeConfigSecretRef), built as RemoteAs builds it: the kubeconfig
// Secret read through reader (the user's client: a user who may not read
// it gets the API server's refusal), no files, no exec plugins, each
// request ending after timeout. It writes as the kubeconfig's credentials
// allow: the web UI's diff dry-runs a remote target's objects with it
// (DryRunCluster).
func RemoteClientAs(ctx context.Context, ms *v1alpha1.ManifestSync, c *v1alpha1.ClusterRef, reader client.Reader, timeout time.Duration) (client.Client, error) {
	ref := KubeConfigOf(ms, c.KubeConfigSecretRef)
	remote, _, err := RemoteAs(ctx, ref, reader, timeout)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", ref.Name, err)
	}
	return remote, nil
}

// RemoteAs is the client and discovery of the cluster of the kubeconfig
// Secret ref, the Secret read through reader, under the rules of a page
// view: the kubeconfig may not name files nor run a program (whatever
// --allow-kubeconfig-exec), and each request ends after timeout.
func RemoteAs(ctx context.Context, ref KubeConfigRef, reader client.Reader, timeout time.Duration) (client.Client, discovery.DiscoveryInterface, error) {
	secret := &corev1.Secret{}
	if err := reader.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		return nil, nil, fmt.Errorf("reading kubeconfig Secret %q: %w", ref.Name, err)
	}
	cfg, err := KubeConfigREST(secret.Data[ref.Key], false)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig Secret %q, key %q: %w", ref.Name, ref.Key, err)
	}
	cfg.Timeout = timeout
	cfg.UserAgent = FieldManager + "-ui"
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, hc)
	if err != nil {
		return nil, nil, err
	}
	remote, err := client.New(cfg, client.Options{Scheme: clientgoscheme.Scheme, Mapper: mapper, HTTPClient: hc})
	if err != nil {
		return nil, nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, nil, err
	}
	return remote, dc, nil
}
