package git

import (
	"context"
	"fmt"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
)

// Credentials returns the credentials of the Secret a git source's
// secretRef names: the operator reads it in the ManifestSync's namespace,
// as its service account; the CLI reads NAME.yaml beside the sync file.
// Its errors name the Secret, never its data.
type Credentials func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*Auth, error)

// Keyring returns the public keys of the Secret a git source's
// verify.secretRef names (ParseKeys). Its errors name the Secret, never
// its data.
type Keyring func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*Keys, error)

// SecretKeys is the Keyring of secrets, which reads the Secrets of
// namespace: the keys are named "Secret NAMESPACE/NAME" in messages.
func SecretKeys(namespace string, secrets source.Secrets) Keyring {
	if secrets == nil {
		return nil
	}
	return func(ctx context.Context, ref v1alpha1.LocalObjectReference) (*Keys, error) {
		data, err := secrets(ctx, ref)
		if err != nil {
			return nil, err
		}
		return ParseKeys("Secret "+namespace+"/"+ref.Name, data)
	}
}

// Provider is the git provider of a source.Resolver: it fetches through
// one Fetcher, whose cache makes an unchanged remote cost one ref listing
// per poll, with the credentials Credentials gives (none when it is nil),
// verifying the commits of sources with verify with the keys Keys gives
// (such a source fails when it is nil: nothing is read unverified).
type Provider struct {
	Fetcher     *Fetcher
	Credentials Credentials
	Keys        Keyring
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
	var keys *Keys
	if v := src.Verify; v != nil {
		if p.Keys == nil {
			return nil, fmt.Errorf("source %q: verify: no Secret of keys can be read here", name)
		}
		var err error
		if keys, err = p.Keys(ctx, v.SecretRef); err != nil {
			return nil, fmt.Errorf("source %q: verify: %w", name, err)
		}
	}
	return p.Fetcher.FetchVerified(ctx, name, src, auth, keys)
}
