package importer

import (
	"context"
	"strings"
	"testing"

	sigsyaml "sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/operator/crd"
)

// TestImportedPassesTheCRD: every ManifestSync the fixtures import (git,
// oci with its ref, layerSelector and cosign verify, git verify, helm)
// passes the ManifestSync CRD's schema and CEL rules, checked as the API
// server checks a create, not only engine.Validate that Import runs.
func TestImportedPassesTheCRD(t *testing.T) {
	v, err := crd.ManifestSync()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"flux.yaml", "argo.yaml", "oci.yaml"} {
		res, err := Import(load(t, name), Options{Repos: checkout()})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Syncs) == 0 {
			t.Fatalf("%s: nothing imported", name)
		}
		for _, im := range res.Syncs {
			y, err := im.YAML()
			if err != nil {
				t.Fatal(err)
			}
			var obj map[string]any
			if err := sigsyaml.Unmarshal(y, &obj); err != nil {
				t.Fatal(err)
			}
			_, errs, err := v.Validate(context.Background(), obj)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range errs {
				t.Errorf("%s: ManifestSync %s: %s: %s", name, im.Sync.Name, e.Field, e.Msg)
			}
		}
	}
}

// ociRepo is a Flux OCIRepository named name with the spec fields extra,
// and a Kustomization of it.
func ociRepo(name, extra string) string {
	return "---\napiVersion: source.toolkit.fluxcd.io/v1\nkind: OCIRepository\nmetadata: {name: " + name + ", namespace: flux-system}\nspec:\n  url: oci://ghcr.io/org/" + name + "\n" + extra +
		"---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: " + name + ", namespace: flux-system}\nspec:\n  sourceRef: {kind: OCIRepository, name: " + name + "}\n  path: ./deploy\n  prune: true\n  targetNamespace: apps\n"
}

// A Kustomization of an OCIRepository: the oci source carries its url,
// reference (latest by default), credentials, verification keys and the
// Kustomization's path and substitution. A verification with no
// equivalent (keyless, notation) writes nothing rather than a source
// read unverified, and says why; so does a Bucket.
func TestOCIRepository(t *testing.T) {
	syncs, findings := mustImport(t, ociRepo("plain", "")+
		ociRepo("signed", "  ref: {tag: v2}\n  secretRef: {name: auth}\n  verify: {provider: cosign, secretRef: {name: keys}, matchOIDCIdentity: [{issuer: x, subject: y}]}\n")+
		ociRepo("keyless", "  verify: {provider: cosign}\n")+
		ociRepo("notation", "  verify: {provider: notation, secretRef: {name: trust}}\n")+
		`---
apiVersion: source.toolkit.fluxcd.io/v1
kind: Bucket
metadata: {name: b, namespace: flux-system}
spec: {bucketName: x, endpoint: s3.example.com}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: bucket, namespace: flux-system}
spec:
  sourceRef: {kind: Bucket, name: b}
`, Options{})
	p := syncs["plain"]
	if p == nil || len(p.Spec.Sources) != 1 || p.Spec.Sources[0].OCI == nil {
		t.Fatalf("plain: %+v", p)
	}
	if o := p.Spec.Sources[0].OCI; o.URL != "oci://ghcr.io/org/plain" || o.Ref != (v1alpha1.OCIRef{}) || o.Path != "deploy" || o.Verify != nil || o.SecretRef != nil {
		t.Errorf("plain's oci source: %+v", o)
	}
	s := syncs["signed"]
	if s == nil {
		t.Fatal("signed: nothing written")
	}
	o := s.Spec.Sources[0].OCI
	if o.Ref.Tag != "v2" || o.SecretRef == nil || o.SecretRef.Name != "auth" || o.Verify == nil || o.Verify.Provider != "cosign" || o.Verify.SecretRef.Name != "keys" {
		t.Errorf("signed's oci source: %+v", o)
	}
	for _, n := range []string{"keyless", "notation", "bucket"} {
		if syncs[n] != nil {
			t.Errorf("%s: a ManifestSync was written: %+v", n, syncs[n].Spec.Sources[0])
		}
	}
	for _, want := range []string{
		"OCIRepository flux-system/signed spec.verify.matchOIDCIdentity: not used with keys",
		"Kustomization flux-system/keyless spec.sourceRef: OCIRepository keyless verifies keyless",
		"OCIRepository flux-system/keyless spec.verify: no secretRef: keyless verification is not supported",
		"Kustomization flux-system/notation spec.sourceRef: OCIRepository notation verifies with notation",
		`OCIRepository flux-system/notation spec.verify.provider: "notation" has no equivalent`,
		"Kustomization flux-system/bucket spec.sourceRef: a Bucket is not a source here",
	} {
		if !strings.Contains(findings, want) {
			t.Errorf("no finding %q in:\n%s", want, findings)
		}
	}
	if strings.Contains(findings, "engine import does not know this field") {
		t.Errorf("a field was not known:\n%s", findings)
	}
}

// A GitRepository's verify becomes the git source's: Flux v1's modes as
// they are, v1beta2's head as HEAD, the same Secret (a copy reported when
// the source is of another namespace); a mode that is not Flux's is
// refused by validation rather than the source losing its verification.
func TestGitVerification(t *testing.T) {
	gr := func(ns, name, verify string) string {
		return "---\napiVersion: source.toolkit.fluxcd.io/v1\nkind: GitRepository\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n  url: https://example.com/" + name + ".git\n  ref: {tag: v1.0.0}\n  verify: " + verify + "\n" +
			"---\napiVersion: kustomize.toolkit.fluxcd.io/v1\nkind: Kustomization\nmetadata: {name: " + name + ", namespace: flux-system}\nspec:\n  sourceRef: {kind: GitRepository, name: " + name + ", namespace: " + ns + "}\n  serviceAccountName: sa\n"
	}
	syncs, findings := mustImport(t, gr("flux-system", "tag", "{mode: Tag, secretRef: {name: keys}}")+
		gr("flux-system", "old", "{mode: head, secretRef: {name: keys}}")+
		gr("other", "default", "{secretRef: {name: keys}}"), Options{})
	for name, mode := range map[string]string{"tag": "Tag", "old": "HEAD", "default": ""} {
		ms := syncs[name]
		if ms == nil {
			t.Fatalf("%s: nothing written", name)
		}
		v := ms.Spec.Sources[0].Git.Verify
		if v == nil || v.Mode != mode || v.SecretRef.Name != "keys" {
			t.Errorf("%s: verify %+v, want mode %q", name, v, mode)
		}
	}
	if !strings.Contains(findings, "GitRepository other/default spec.verify.secretRef: the ManifestSync reads Secret keys from its own namespace flux-system, not other: copy it there") {
		t.Errorf("findings:\n%s", findings)
	}
	if strings.Contains(findings, "spec.verify.mode") {
		t.Errorf("a tag ref was reported for mode Tag:\n%s", findings)
	}
	_, err := importYAML(t, gr("flux-system", "bad", "{mode: Commit, secretRef: {name: keys}}"), Options{})
	if err == nil || !strings.Contains(err.Error(), "git.verify.mode") {
		t.Errorf("mode Commit: %v", err)
	}
}

// An Argo CD Application of an oci:// repoURL without a chart (Argo CD
// 3.1's OCI artifacts of manifests) gets an oci source: targetRevision a
// tag, a semver range or a digest; with helm settings the artifact's
// path is a chart of it.
func TestArgoOCI(t *testing.T) {
	app := func(name, rev, extra string) string {
		return "---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: " + name + ", namespace: argocd}\nspec:\n  source:\n    repoURL: oci://registry.example.com/org/app\n    targetRevision: \"" + rev + "\"\n    path: manifests\n" + extra + "  destination: {server: https://kubernetes.default.svc, namespace: app}\n  syncPolicy: {automated: {prune: true}}\n"
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	syncs, _ := mustImport(t, app("tag", "1.2.3", "")+app("range", ">=1.2 <2", "")+app("pinned", digest, "")+app("latest", "", "")+
		app("chart", "1.0.0", "    helm: {releaseName: web}\n"), Options{})
	for name, want := range map[string]v1alpha1.OCIRef{"tag": {Tag: "1.2.3"}, "range": {SemVer: ">=1.2 <2"}, "pinned": {Digest: digest}, "latest": {}} {
		ms := syncs[name]
		if ms == nil || len(ms.Spec.Sources) != 1 || ms.Spec.Sources[0].OCI == nil {
			t.Fatalf("%s: %+v", name, ms)
		}
		if o := ms.Spec.Sources[0].OCI; o.Ref != want || o.URL != "oci://registry.example.com/org/app" || o.Path != "manifests" {
			t.Errorf("%s: %+v, want ref %+v", name, o, want)
		}
	}
	c := syncs["chart"]
	if c == nil || len(c.Spec.Sources) != 2 || c.Spec.Sources[0].OCI == nil || c.Spec.Sources[1].Helm == nil {
		t.Fatalf("chart: %+v", c)
	}
	if h := c.Spec.Sources[1].Helm; h.Source != c.Spec.Sources[0].Name || h.Path != "manifests" || c.Spec.Sources[0].OCI.Path != "" {
		t.Errorf("chart: %+v, %+v", c.Spec.Sources[0].OCI, h)
	}
}
