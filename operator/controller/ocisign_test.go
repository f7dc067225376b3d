package controller

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/internal/registrytest"
	"github.com/manifestsync/manifestsync/oci"
	"github.com/manifestsync/manifestsync/oci/cosigntest"
	"github.com/manifestsync/manifestsync/operator/testenv"
)

// verify: {provider: cosign, secretRef} on an oci source, end to end
// against Debian's docker-registry on loopback, as `engine operator` wires
// it: an artifact signed with a cosign key whose public key is in the
// Secret syncs, in either of cosign's layouts (see package cosigntest); an unsigned one is
// Ready False, reason SourceVerifyFailed, naming the artifact by digest
// and the Secret, with nothing of it applied and none of its layers
// downloaded. A tag moved to an unsigned artifact, then to one re-signed
// by another key, keeps what the last verified artifact applied; signed
// with the trusted key, it syncs.
//
// What a hostile user gets: one who can push to the repository but holds
// no trusted key can move the tag, and the cluster keeps the last
// verified artifact; a signature copied from another artifact names that
// artifact's digest and is refused (oci's TestCosignVerify).
func TestOCICosignVerify(t *testing.T) {
	env.Need(t)
	ctx := context.Background()
	reg := registrytest.StartWith(t, registrytest.Config{AccessLog: true})
	cache := NewOCICache(oci.CacheOptions{Limits: oci.Limits{Timeout: 20 * time.Second}})
	cache.Verify = oci.CosignVerifier(cache.Client) // as cmd/engine/operator.go
	ownOperator(t, func(r *Reconciler, mgr ctrl.Manager) error {
		r.OCI = cache.Provider
		return nil
	})
	c := remoteEnv.Client
	repo, err := name.NewRepository(reg.Addr+"/app", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	push := func(tag, version string) string {
		t.Helper()
		d := &oci.Dir{Files: map[string][]byte{"cm.yaml": fmt.Appendf(nil, "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\ndata:\n  version: %q\n", version)}}
		digest, err := oci.Push(ctx, d, "oci://"+reg.Addr+"/app:"+tag, oci.PushOptions{Insecure: true})
		if err != nil {
			t.Fatal(err)
		}
		return digest
	}
	alice, mallory := cosigntest.NewKey(t), cosigntest.NewKey(t)

	home := remoteEnv.Namespace(t, nil)
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: home, Name: "cosign-keys"}, Data: map[string][]byte{"cosign.pub": alice.Pub}}
	if err := c.Create(ctx, keys); err != nil {
		t.Fatal(err)
	}
	sync := func(name, tag string) (*v1alpha1.ManifestSync, string) {
		t.Helper()
		target := remoteEnv.Namespace(t, nil)
		ms := newSync(home, name, v1alpha1.ManifestSyncSpec{
			Sources: []v1alpha1.Source{{Name: "app", OCI: &v1alpha1.OCISource{
				URL: "oci://" + reg.Addr + "/app", Ref: v1alpha1.OCIRef{Tag: tag}, Insecure: true,
				Verify: &v1alpha1.OCIVerification{Provider: "cosign", SecretRef: v1alpha1.LocalObjectReference{Name: "cosign-keys"}},
			}}},
			Targets:  targets(target),
			Interval: &metav1.Duration{Duration: time.Second},
		})
		remoteEnv.CreateSync(t, ms, timeout)
		return ms, target
	}
	version := func(target string) (string, error) {
		cm := &corev1.ConfigMap{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: target, Name: "app"}, cm); err != nil {
			return "", err
		}
		return cm.Data["version"], nil
	}
	// refused waits for ms to be Ready False, SourceVerifyFailed, with a
	// message naming the artifact by digest and the Secret, and saying why.
	refused := func(ms *v1alpha1.ManifestSync, digest, why string) {
		t.Helper()
		want := []string{`source "app"`, "artifact oci://" + reg.Addr + "/app@" + digest, "Secret " + home + "/cosign-keys", why}
		testenv.Eventually(t, timeout, func() error {
			cur := &v1alpha1.ManifestSync{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(ms), cur); err != nil {
				return err
			}
			ready := condition(cur, v1alpha1.ConditionReady)
			if ready.Status != metav1.ConditionFalse || ready.Reason != v1alpha1.ReasonSourceVerifyFailed {
				return fmt.Errorf("Ready %s %s: %s", ready.Status, ready.Reason, ready.Message)
			}
			for _, w := range want {
				if !strings.Contains(ready.Message, w) {
					return fmt.Errorf("message %q does not say %q", ready.Message, w)
				}
			}
			t.Logf("%s: %s", ms.Name, ready.Message)
			return nil
		})
		if n := recorded.count(ms, EventSourceVerifyFailed); n == 0 {
			t.Errorf("%s: no %s event", ms.Name, EventSourceVerifyFailed)
		}
	}

	// Signed with the key of the Secret: synced at TAG@DIGEST.
	d1 := push("live", "1")
	cosigntest.Write(t, repo, d1, cosigntest.SignDigest(t, alice, repo.Digest(d1)))
	live, liveTarget := sync("live", "live")
	got := remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(live), v1alpha1.ReasonSynced, timeout)
	if rev := got.Status.Inputs.Sources["app"]; rev != "live@"+d1 {
		t.Errorf("input revision %q, want live@%s", rev, d1)
	}
	if v, err := version(liveTarget); err != nil || v != "1" {
		t.Fatalf("the signed artifact's ConfigMap: %q, %v", v, err)
	}

	// cosign v3's default, a Sigstore bundle attached as a referrer:
	// synced.
	db := push("bundle", "bundle")
	cosigntest.WriteBundle(t, repo, db, cosigntest.Bundle(t, alice, cosigntest.Statement(db, cosigntest.SignPredicateType)))
	bundle, bundleTarget := sync("bundle", "bundle")
	remoteEnv.WaitForReason(t, client.ObjectKeyFromObject(bundle), v1alpha1.ReasonSynced, timeout)
	if v, err := version(bundleTarget); err != nil || v != "bundle" {
		t.Fatalf("the bundle-signed artifact's ConfigMap: %q, %v", v, err)
	}

	// Unsigned: refused, nothing applied.
	d0 := push("unsigned", "0")
	unsigned, unsignedTarget := sync("unsigned", "unsigned")
	refused(unsigned, d0, "unsigned")
	if _, err := version(unsignedTarget); !apierrors.IsNotFound(err) {
		t.Errorf("the unsigned artifact's ConfigMap: %v, want it not applied", err)
	}

	// The tag moved to an unsigned artifact: refused, the last verified
	// artifact's objects kept, no layer of the new one downloaded.
	d2 := push("live", "2")
	pushed := len(reg.Log(t))
	refused(live, d2, "unsigned")
	if v, err := version(liveTarget); err != nil || v != "1" {
		t.Errorf("after an unsigned artifact: version %q, %v; want the last verified one's, 1", v, err)
	}
	if n := blobGets(t, reg, pushed); n != 0 {
		t.Errorf("%d blobs read while the artifact was unsigned", n)
	}

	// Re-signed by a key not in the Secret: refused all the same.
	cosigntest.Write(t, repo, d2, cosigntest.SignDigest(t, mallory, repo.Digest(d2)))
	refused(live, d2, "not signed by any of the keys")
	if v, err := version(liveTarget); err != nil || v != "1" {
		t.Errorf("after an artifact signed by another key: version %q, %v; want 1", v, err)
	}

	// Signed by the trusted key too (cosign appends): synced.
	cosigntest.Write(t, repo, d2, cosigntest.SignDigest(t, mallory, repo.Digest(d2)), cosigntest.SignDigest(t, alice, repo.Digest(d2)))
	testenv.Eventually(t, timeout, func() error {
		cur := &v1alpha1.ManifestSync{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(live), cur); err != nil {
			return err
		}
		if rev := cur.Status.Inputs.Sources["app"]; rev != "live@"+d2 {
			return errors.New("input revision " + rev)
		}
		if v, err := version(liveTarget); err != nil || v != "2" {
			return fmt.Errorf("version %q, %v", v, err)
		}
		return nil
	})
}

// blobGets counts the blob downloads of a registry's access log after
// mark (a length of the log).
func blobGets(t *testing.T, r *registrytest.Registry, mark int) int {
	t.Helper()
	return len(regexp.MustCompile(`"GET /v2/\S+/blobs/`).FindAllString(r.Log(t)[mark:], -1))
}
