package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/operator/api/v1alpha1"
)

// Mirroring, as reflector and replicator do it: every Secret of namespace
// platform labelled replicate=yes, but for an excluded name, fans out to
// the 200 namespaces a selector picks. Labelling a sixth Secret adds it
// everywhere within 2 s, removing the label prunes it, and a labelled
// Secret of a namespace that does not share it with the ManifestSync's
// namespace is refused by name.
func TestObjectSetMirrorsLabelledSecrets(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	home := env.Namespace(t, nil)
	platform := env.Namespace(t, nil)
	mirror := map[string]string{"mirror": home} // unique to this test
	const fanout = 200
	nss := make([]string, fanout)
	for i := range nss {
		nss[i] = env.Namespace(t, mirror)
	}
	labelled := map[string]string{"replicate": "yes"}
	shared := map[string]string{AllowNamespacesAnnotation: home}
	secret := func(ns, name string, lbls, annotations map[string]string) *corev1.Secret {
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls, Annotations: annotations},
			Data:       map[string][]byte{"value": []byte("secret-" + name)},
		}
		if err := env.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	for i := range 5 {
		secret(platform, fmt.Sprintf("shared-%d", i), labelled, shared)
	}
	secret(platform, "internal-ca", labelled, shared) // excluded by name
	secret(platform, "private", nil, shared)          // not labelled
	sixth := secret(platform, "sixth", nil, shared)

	ms := newSync(home, "mirror", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "shared", Objects: &v1alpha1.ObjectSetSource{
			APIVersion: "v1", Kind: "Secret", Namespace: platform,
			LabelSelector: &metav1.LabelSelector{MatchLabels: labelled},
			Exclude:       []string{"internal-.*"},
		}}},
		Targets: []v1alpha1.Target{{Name: "mirror", NamespaceSelector: &metav1.LabelSelector{MatchLabels: mirror}}},
	})
	start := time.Now()
	createSync(t, ms)
	got := ready(t, ms)
	t.Logf("5 Secrets in %d namespaces after %v", fanout, time.Since(start).Round(time.Millisecond))
	for i := range 5 {
		if n := copies(t, fmt.Sprintf("shared-%d", i)); n != fanout {
			t.Errorf("shared-%d: %d copies, want %d", i, n, fanout)
		}
	}
	for _, name := range []string{"internal-ca", "private", "sixth"} {
		if n := copies(t, name); n != 0 {
			t.Errorf("%s: %d copies, want none", name, n)
		}
	}
	rev := got.Status.Inputs.Sources["shared"]
	if !strings.HasPrefix(rev, "objects:5@sha256:") {
		t.Errorf("inputs.sources.shared = %q, want objects:5@sha256:...", rev)
	}
	// Only the metadata of platform's Secrets is cached, not that of the
	// target namespaces.
	w := reconciler.watches
	w.mu.Lock()
	watched := w.started[watchKey{gvk: corev1.SchemeGroupVersion.WithKind("Secret"), namespace: platform, purpose: watchObjectSets}]
	_, cachedTarget := w.namespaces[nss[0]]
	w.mu.Unlock()
	if !watched || cachedTarget {
		t.Errorf("platform's Secrets watched: %v; a target namespace cached: %v", watched, cachedTarget)
	}

	// A sixth Secret is labelled: it is everywhere within 2 s.
	sixth.Labels = labelled
	if err := env.Client.Update(ctx, sixth); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	eventually(t, 2*time.Second, func() error {
		if n := copies(t, "sixth"); n != fanout {
			return fmt.Errorf("sixth: %d copies of %d", n, fanout)
		}
		return nil
	})
	t.Logf("a sixth labelled Secret in %d namespaces after %v", fanout, time.Since(start).Round(time.Millisecond))
	eventually(t, timeout, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(ms), got); err != nil {
			return err
		}
		if r := got.Status.Inputs.Sources["shared"]; !strings.HasPrefix(r, "objects:6@") {
			return fmt.Errorf("inputs.sources.shared = %q", r)
		}
		return nil
	})

	// Its label is removed: it is pruned everywhere.
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(sixth), sixth); err != nil {
		t.Fatal(err)
	}
	sixth.Labels = nil
	if err := env.Client.Update(ctx, sixth); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	eventually(t, timeout, func() error {
		if n := copies(t, "sixth"); n != 0 {
			return fmt.Errorf("sixth: %d copies left", n)
		}
		return nil
	})
	t.Logf("an unlabelled Secret pruned from %d namespaces after %v", fanout, time.Since(start).Round(time.Millisecond))
	if n := copies(t, "internal-ca"); n != 0 {
		t.Errorf("internal-ca: %d copies, want none", n)
	}
	if n := copies(t, "shared-0"); n != fanout {
		t.Errorf("shared-0: %d copies, want %d", n, fanout)
	}

	// A labelled Secret of a namespace that does not share it: refused,
	// by name, and nothing is applied.
	other := env.Namespace(t, nil)
	secret(other, "unshared", labelled, nil)
	refused := newSync(home, "refused", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "other", Objects: &v1alpha1.ObjectSetSource{
			APIVersion: "v1", Kind: "Secret", Namespace: other,
			LabelSelector: &metav1.LabelSelector{MatchLabels: labelled},
		}}},
		Targets: targets(nss[0]),
	})
	createSync(t, refused)
	failed := waitFor(t, refused, v1alpha1.ReasonSourceFailed)
	want := fmt.Sprintf("Secret %s/unshared is in another namespace and its annotation %s does not list %q", other, AllowNamespacesAnnotation, home)
	if msg := condition(failed, v1alpha1.ConditionReady).Message; !strings.Contains(msg, want) {
		t.Errorf("Ready message %q, want it to contain %q", msg, want)
	}
	if n := copies(t, "unshared"); n != 0 {
		t.Errorf("unshared: %d copies, want none", n)
	}
}

// copies counts the Secrets named name in namespaces other than their
// source's: those the operator made.
func copies(t testing.TB, name string) int {
	t.Helper()
	list := &corev1.SecretList{}
	if err := env.Client.List(context.Background(), list, client.MatchingFields{"metadata.name": name}, client.HasLabels{OwnerLabel}); err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}
