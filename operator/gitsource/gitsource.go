// Package gitsource gives the reconciler its git sources: it reads a
// source's credentials from the Secret its secretRef names, in the
// ManifestSync's namespace (with the reader the reconciler gives: the
// ManifestSync's service account, when it has one), and fetches through one
// shared git.Fetcher, whose cache makes an unchanged remote cost one ref
// listing per poll.
package gitsource

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// Sources implements controller.Sources with go-git.
type Sources struct {
	Fetcher *git.Fetcher
}

// New returns Sources that cache repositories under cacheDir, or in
// memory when it is empty.
func New(cacheDir string) *Sources {
	return &Sources{Fetcher: git.New(git.Options{CacheDir: cacheDir})}
}

// Fetch returns the snapshot of the git source src of ms; secrets reads
// its secretRef, and should be uncached (the manager's APIReader, or an
// impersonating client), so that no Secret body is cached cluster-wide.
func (s *Sources) Fetch(ctx context.Context, ms *v1alpha1.ManifestSync, src *v1alpha1.Source, secrets client.Reader) (*engine.Snapshot, error) {
	if src.Git == nil {
		return nil, fmt.Errorf("source %q is not a git source", src.Name)
	}
	var auth *git.Auth
	if ref := src.Git.SecretRef; ref != nil {
		var secret corev1.Secret
		if err := secrets.Get(ctx, client.ObjectKey{Namespace: ms.Namespace, Name: ref.Name}, &secret); err != nil {
			return nil, fmt.Errorf("secretRef %s/%s: %w", ms.Namespace, ref.Name, err)
		}
		auth = git.FromSecretData(secret.Data)
	}
	return s.Fetcher.Fetch(ctx, src.Name, *src.Git, auth)
}
