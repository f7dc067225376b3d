package git

import (
	"context"
	"fmt"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// Credentials returns the credentials of the Secret a git source's
// secretRef names: the operator reads it in the ManifestSync's namespace,
// as its service account; the CLI reads NAME.yaml beside the sync file.
// Its errors name the Secret, never its data.
type Credentials func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*Auth, error)

// Provider is the git provider of a source.Resolver: it fetches through
// one Fetcher, whose cache makes an unchanged remote cost one ref listing
// per poll, with the credentials Credentials gives (none when it is nil).
type Provider struct {
	Fetcher     *Fetcher
	Credentials Credentials
}

// FetchGit implements source.GitFetcher.
func (p Provider) FetchGit(ctx context.Context, name string, src v1alpha1.GitSource) (*engine.Snapshot, error) {
	var auth *Auth
	if src.SecretRef != nil && p.Credentials != nil {
		var err error
		if auth, err = p.Credentials(ctx, *src.SecretRef); err != nil {
			return nil, fmt.Errorf("source %q: %w", name, err)
		}
	}
	return p.Fetcher.Fetch(ctx, name, src, auth)
}
