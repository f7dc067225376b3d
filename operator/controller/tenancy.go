package controller

import (
	"errors"
	"fmt"
	"sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	ssa "github.com/manifestsync/manifestsync/operator/applier"
)

// errServiceAccountRequired fails a ManifestSync without
// spec.serviceAccountName when Options.RequireServiceAccount is set.
var errServiceAccountRequired = errors.New("spec.serviceAccountName is required: this operator writes only as a service account of the ManifestSync's namespace")

// checkTenancy fails a ManifestSync the operator may not sync at all.
func (r *Reconciler) checkTenancy(ms *v1alpha1.ManifestSync) error {
	if r.Options.RequireServiceAccount && ms.Spec.ServiceAccountName == "" {
		return errServiceAccountRequired
	}
	return nil
}

// localCluster is this cluster as ms writes to it: as the operator, or,
// with a service account (spec.serviceAccountName, or else, in a namespace
// that is not trusted, Options.DefaultServiceAccount), as that account, so
// that a ManifestSync can touch only what its account's RBAC allows. The
// operator's own caches (metadata of owned objects and namespaces) stay
// the operator's: they only spare requests, every read that decides a
// write and every write go through the account. As the operator, a
// ManifestSync of a namespace that is not trusted writes through the
// write gate (see writegate.go).
func (r *Reconciler) localCluster(ms *v1alpha1.ManifestSync) (*cluster, error) {
	c := &cluster{name: inCluster, client: r.Client, live: r.APIReader, managed: r.managed, namespaces: r.Client, shard: r.Options.ShardID}
	account := r.Options.serviceAccount(ms)
	if account == "" {
		if r.Options.RequireServiceAccount {
			return nil, errServiceAccountRequired
		}
		if r.Options.gated(ms) {
			c.client = ssa.GatedClient{Client: r.Client, Gate: r.writeGate(ms)}
		}
		return c, nil
	}
	ac, err := r.accounts.client(ms.Namespace, account)
	if err != nil {
		return nil, fmt.Errorf("service account %q: %w", account, err)
	}
	c.client, c.live = ac, ac
	return c, nil
}

// reader reads ms's object sources: as ms's service account, when it has
// one.
func (r *Reconciler) reader(ms *v1alpha1.ManifestSync) (client.Reader, error) {
	c, err := r.localCluster(ms)
	if err != nil {
		return nil, err
	}
	return c.live, nil
}

// accounts holds one client per impersonated service account.
type accounts struct {
	config *rest.Config
	scheme *runtime.Scheme
	mapper apimeta.RESTMapper

	mu      sync.Mutex
	clients map[string]client.Client // by "system:serviceaccount:<ns>:<name>"
}

// client returns the client that acts as the service account.
func (a *accounts) client(namespace, name string) (client.Client, error) {
	user := "system:serviceaccount:" + namespace + ":" + name
	a.mu.Lock()
	defer a.mu.Unlock()
	if c := a.clients[user]; c != nil {
		return c, nil
	}
	cfg := rest.CopyConfig(a.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: a.scheme, Mapper: a.mapper, HTTPClient: hc})
	if err != nil {
		return nil, err
	}
	a.clients[user] = c
	return c, nil
}
