package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/discovery"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	helmrender "github.com/manifestsync/manifestsync/helm"
)

// capabilityTTL is how long a cluster's discovered capabilities serve
// before discovery is asked again: a cluster is upgraded, or gains an API,
// rarely, and a chart that reads .Capabilities then renders anew within
// this time.
const capabilityTTL = 10 * time.Minute

// capabilityCache holds what charts see of each cluster (.Capabilities:
// its version and API versions), as `helm install` asks a cluster, by
// discovery: once per cluster per capabilityTTL, not per render. The zero
// value is ready.
type capabilityCache struct {
	mu      sync.Mutex
	entries map[string]capabilityEntry // "" this cluster, else NAMESPACE/ClusterID
}

type capabilityEntry struct {
	caps   engine.HelmCapabilities
	digest string // of caps, for the last evaluation's key
	at     time.Time
}

// get returns the capabilities of cluster key, asking discover when they
// are older than capabilityTTL; a failed discovery serves the last ones
// known, if any.
func (c *capabilityCache) get(key string, discover func() (discovery.DiscoveryInterface, error)) (capabilityEntry, error) {
	c.mu.Lock()
	e, ok := c.entries[key]
	c.mu.Unlock()
	if ok && time.Since(e.at) < capabilityTTL {
		return e, nil
	}
	caps, err := discoverCapabilities(discover)
	if err != nil {
		if ok {
			return e, nil
		}
		return capabilityEntry{}, err
	}
	b, _ := json.Marshal(caps)
	sum := sha256.Sum256(b)
	e = capabilityEntry{caps: caps, digest: hex.EncodeToString(sum[:]), at: time.Now()}
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[string]capabilityEntry{}
	}
	c.entries[key] = e
	c.mu.Unlock()
	return e, nil
}

// discoverCapabilities asks a cluster its version and API versions as
// Helm does (action.GetVersionSet): every group version ("apps/v1") and
// every group version with a kind ("apps/v1/Deployment"), sorted.
func discoverCapabilities(discover func() (discovery.DiscoveryInterface, error)) (engine.HelmCapabilities, error) {
	dc, err := discover()
	if err != nil {
		return engine.HelmCapabilities{}, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return engine.HelmCapabilities{}, fmt.Errorf("the cluster's version: %w", err)
	}
	groups, resources, err := dc.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return engine.HelmCapabilities{}, fmt.Errorf("the cluster's API versions: %w", err)
	}
	seen := map[string]bool{}
	for _, g := range groups {
		for _, gv := range g.Versions {
			seen[gv.GroupVersion] = true
		}
	}
	for _, l := range resources {
		for _, r := range l.APIResources {
			seen[path.Join(l.GroupVersion, r.Kind)] = true
		}
	}
	versions := make([]string, 0, len(seen))
	for k := range seen {
		versions = append(versions, k)
	}
	slices.Sort(versions)
	return engine.HelmCapabilities{KubeVersion: v.GitVersion, APIVersions: versions}, nil
}

// readsCapabilities reports whether an evaluation of spec may render a
// chart: a helm source, or a transform (helm.template).
func readsCapabilities(spec *v1alpha1.ManifestSyncSpec) bool {
	if spec.Transform != nil && spec.Transform.Starlark != nil {
		return true
	}
	return slices.ContainsFunc(spec.Sources, func(s v1alpha1.Source) bool { return s.Helm != nil })
}

// chartOptions sets, for an evaluation of ms that may render charts, the
// renderer and the capabilities of this cluster and of each remote
// cluster a target names; it returns a digest of them for the last
// evaluation's key ("" when ms renders no chart).
func (r *Reconciler) chartOptions(ctx context.Context, ms *v1alpha1.ManifestSync, opts *engine.Options) (string, error) {
	if !readsCapabilities(&ms.Spec) {
		return "", nil
	}
	opts.Helm = helmrender.Renderer{}
	digest := ""
	if r.sets != nil {
		local, err := r.caps.get("", func() (discovery.DiscoveryInterface, error) {
			return discovery.NewDiscoveryClient(r.sets.kinds.RESTClient()), nil
		})
		if err != nil {
			// Only a render for this cluster fails (see HelmCapabilities.Unknown).
			local = capabilityEntry{caps: engine.HelmCapabilities{Unknown: err.Error()}, digest: "unknown"}
		}
		opts.Capabilities, digest = local.caps, local.digest
	}
	for _, t := range ms.Spec.Targets {
		if t.Cluster == nil {
			continue
		}
		id := engine.ClusterID(t.Cluster)
		if _, done := opts.ClusterCapabilities[id]; done {
			continue
		}
		remote, err := r.caps.get(ms.Namespace+"/"+id, func() (discovery.DiscoveryInterface, error) {
			ref := kubeConfigRefOf(ms, t.Cluster)
			reader, err := r.reader(ms)
			if err != nil {
				return nil, err
			}
			rc, err := r.remotes.get(ctx, ref, reader)
			if err != nil {
				return nil, err
			}
			return discovery.NewDiscoveryClientForConfigAndClient(rc.config, rc.http)
		})
		if err != nil {
			// An unreachable cluster fails the renders of its targets
			// only: the other targets, and those of this cluster that
			// render no chart, go on.
			remote = capabilityEntry{caps: engine.HelmCapabilities{Unknown: fmt.Sprintf("cluster %q: %v", t.Cluster.KubeConfigSecretRef.Name, err)}, digest: "unknown"}
		}
		if opts.ClusterCapabilities == nil {
			opts.ClusterCapabilities = map[string]engine.HelmCapabilities{}
		}
		opts.ClusterCapabilities[id] = remote.caps
		digest += "," + id + "=" + remote.digest
	}
	return digest, nil
}
