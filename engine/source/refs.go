package source

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
)

// ErrNotFound is wrapped by an ObjectReader's error for an object that
// does not exist, so that an optional ref may be missing.
var ErrNotFound = errors.New("not found")

// RefsPrefix starts the revision of a source that read refs: the digest
// of what it read, then "@" and the revision of the source itself
// ("refs:sha256:HEX@main@sha1:HASH"), so that a ConfigMap's change is a
// new revision of the source and the git commit still ends it.
const RefsPrefix = "refs:"

// OwnRevision is the revision of a source without the digest of the refs
// that starts it ("" for the snapshot of a kustomize source's refs).
func OwnRevision(rev string) string {
	r, ok := strings.CutPrefix(rev, RefsPrefix)
	if !ok {
		return rev
	}
	_, own, _ := strings.Cut(r, "@")
	return own
}

// A Ref is a ConfigMap or Secret of the ManifestSync's namespace that a
// source reads: a substituteFrom entry, or a helm valuesFrom entry with a
// kind.
type Ref struct {
	Kind     string // ConfigMap or Secret
	Name     string
	Optional bool
}

// Key is the ref's key in engine.Snapshot.Refs: "ConfigMap/NAME".
func (r Ref) Key() string { return r.Kind + "/" + r.Name }

// RefsOf lists the refs of src in the order they are read, each once (a
// required entry wins over an optional one of the same object).
func RefsOf(src *v1alpha1.Source) []Ref {
	var refs []Ref
	add := func(kind, name string, optional bool) {
		if i := slices.IndexFunc(refs, func(r Ref) bool { return r.Kind == kind && r.Name == name }); i >= 0 {
			refs[i].Optional = refs[i].Optional && optional
			return
		}
		refs = append(refs, Ref{Kind: kind, Name: name, Optional: optional})
	}
	var from []v1alpha1.SubstituteReference
	switch {
	case src.Git != nil:
		from = src.Git.SubstituteFrom
	case src.Kustomize != nil:
		from = src.Kustomize.SubstituteFrom
	case src.Helm != nil:
		for _, v := range src.Helm.ValuesFrom {
			if v.Kind != "" {
				add(v.Kind, v.Name, v.Optional)
			}
		}
	}
	for _, s := range from {
		add(s.Kind, s.Name, s.Optional)
	}
	return refs
}

// readRefs reads the refs of src into a copy of snap (which a cache may
// share, so it is not changed): Refs set, the revision prefixed with
// their digest. A kustomize source has no snapshot of its own: snap is
// nil and the result holds only the refs, which the engine builds on.
// An optional ref that is missing is absent; a required one fails.
func (r *Resolver) readRefs(ctx context.Context, src *v1alpha1.Source, snap *engine.Snapshot) (*engine.Snapshot, error) {
	refs := RefsOf(src)
	if len(refs) == 0 {
		return snap, nil
	}
	data := make(map[string]map[string]string, len(refs))
	for _, ref := range refs {
		if errs := validation.IsDNS1123Subdomain(ref.Name); len(errs) > 0 {
			return nil, fmt.Errorf("source %q: %s: the name of a %s of namespace %q: %s", src.Name, ref.Key(), ref.Kind, r.Namespace, strings.Join(errs, "; "))
		}
		m, err := r.readRef(ctx, src, ref)
		if errors.Is(err, ErrNotFound) && ref.Optional {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("source %q: %s: %w", src.Name, ref.Key(), err)
		}
		data[ref.Key()] = m
	}
	out := &engine.Snapshot{}
	if snap != nil {
		c := *snap
		out = &c
	}
	out.Refs = data
	out.Revision = RefsPrefix + RefsDigest(data)
	if snap != nil {
		out.Revision += "@" + snap.Revision
	}
	return out, nil
}

// readRef reads one ref: from the copy beside the sync file with Local
// (NAME.yaml; no copy is ErrNotFound), else through the source's object
// reader, which the operator runs as the ManifestSync's service account.
func (r *Resolver) readRef(ctx context.Context, src *v1alpha1.Source, ref Ref) (map[string]string, error) {
	var obj map[string]any
	if r.Local != nil {
		var err error
		if obj, err = r.Local.readRef(ref); err != nil {
			return nil, err
		}
	} else {
		if r.Objects == nil {
			return nil, errors.New("no object reader")
		}
		reader, err := r.Objects(src)
		if err != nil {
			return nil, err
		}
		if obj, err = reader.Get(ctx, v1alpha1.ObjectSource{APIVersion: "v1", Kind: ref.Kind, Namespace: r.Namespace, Name: ref.Name}); err != nil {
			return nil, err
		}
	}
	return RefData(obj)
}

// RefData is the data of a ConfigMap (data; binaryData is not text) or a
// Secret (data decoded, and stringData of a manifest over it, as the API
// server merges them).
func RefData(obj map[string]any) (map[string]string, error) {
	out := map[string]string{}
	data, _ := obj["data"].(map[string]any)
	secret := obj["kind"] == "Secret"
	for k, v := range data {
		s, _ := v.(string)
		if secret {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, fmt.Errorf("data.%s: not base64", k)
			}
			s = string(b)
		}
		out[k] = s
	}
	if secret {
		sd, _ := obj["stringData"].(map[string]any)
		for k, v := range sd {
			out[k], _ = v.(string)
		}
	}
	return out, nil
}

// RefsDigest is "sha256:HEX" over the refs read, by key.
func RefsDigest(refs map[string]map[string]string) string {
	h := sha256.New()
	for _, key := range slices.Sorted(maps.Keys(refs)) {
		fmt.Fprintf(h, "%s\x00%d\x00", key, len(refs[key]))
		for _, k := range slices.Sorted(maps.Keys(refs[key])) {
			v := refs[key][k]
			fmt.Fprintf(h, "%d\x00%s%d\x00%s", len(k), k, len(v), v)
		}
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
