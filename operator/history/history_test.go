package history

import (
	"encoding/json"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
)

const (
	c1 = "1111111111111111111111111111111111111111"
	c2 = "2222222222222222222222222222222222222222"
)

func testSync() *v1alpha1.ManifestSync {
	entry := func(rev, commit, tls, params string) v1alpha1.HistoryEntry {
		return v1alpha1.HistoryEntry{Revision: rev, Result: "Synced", Time: metav1.Unix(1767323045, 0),
			Inputs: &v1alpha1.Inputs{Sources: map[string]string{"repo": "main@sha1:" + commit, "base": "main@sha1:" + commit, "tls": tls}, Params: params}}
	}
	return &v1alpha1.ManifestSync{
		ObjectMeta: metav1.ObjectMeta{Namespace: "platform", Name: "web"},
		Spec: v1alpha1.ManifestSyncSpec{Sources: []v1alpha1.Source{
			{Name: "repo", Git: &v1alpha1.GitSource{URL: "https://example.com/r.git", Ref: v1alpha1.GitRef{Branch: "main"}}},
			{Name: "tls", Object: &v1alpha1.ObjectSource{APIVersion: "v1", Kind: "Secret", Name: "tls"}},
			{Name: "base", Kustomize: &v1alpha1.KustomizeSource{Source: "repo"}},
		}},
		Status: v1alpha1.ManifestSyncStatus{
			Inputs: &v1alpha1.Inputs{Sources: map[string]string{"repo": "main@sha1:" + c2, "tls": "resourceVersion:9"}, Params: "sha256:p2"},
			History: []v1alpha1.HistoryEntry{
				entry("sha256:222222222222222222", c2, "resourceVersion:9", "sha256:p2"),
				entry("sha256:111111111111111111", c1, "resourceVersion:5", "sha256:p1"),
			},
		},
	}
}

func TestPinAndUnpin(t *testing.T) {
	ms := testSync()
	res, err := Pin(ms, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) != 1 || res.Changes[0] != (Change{Source: "repo", From: v1alpha1.GitRef{Branch: "main"}, To: v1alpha1.GitRef{Commit: c1}}) {
		t.Errorf("changes: %+v", res.Changes)
	}
	if ms.Spec.Sources[0].Git.Ref != (v1alpha1.GitRef{Commit: c1}) {
		t.Errorf("ref: %+v", ms.Spec.Sources[0].Git.Ref)
	}
	// The object source and the changed params are named; the kustomize
	// source follows its base silently.
	if len(res.Notes) != 2 || !strings.Contains(res.Notes[0], `source "tls" is an object (Secret platform/tls)`) || !strings.Contains(res.Notes[1], "spec.params") || res.Complete() {
		t.Errorf("notes: %q", res.Notes)
	}
	var rec Record
	if err := json.Unmarshal([]byte(ms.Annotations[Annotation]), &rec); err != nil || rec.Refs["repo"] != (v1alpha1.GitRef{Branch: "main"}) || rec.Revision != "sha256:111111111111111111" {
		t.Errorf("record %q: %v", ms.Annotations[Annotation], err)
	}

	// A second rollback keeps the refs of before the first.
	if _, err := Pin(ms, 0); err != nil {
		t.Fatal(err)
	}
	if ms.Spec.Sources[0].Git.Ref != (v1alpha1.GitRef{Commit: c2}) {
		t.Errorf("ref: %+v", ms.Spec.Sources[0].Git.Ref)
	}
	res, err = Unpin(ms)
	if err != nil {
		t.Fatal(err)
	}
	if ms.Spec.Sources[0].Git.Ref != (v1alpha1.GitRef{Branch: "main"}) || len(res.Changes) != 1 {
		t.Errorf("after undo: ref %+v, changes %+v", ms.Spec.Sources[0].Git.Ref, res.Changes)
	}
	if _, ok := ms.Annotations[Annotation]; ok {
		t.Error("the annotation is still there")
	}
	if _, err := Unpin(ms); err == nil || !strings.Contains(err.Error(), "not rolled back") {
		t.Errorf("undo twice: %v", err)
	}
}

func TestPinErrors(t *testing.T) {
	for _, n := range []int{-1, 2} {
		if _, err := Pin(testSync(), n); err == nil || !strings.Contains(err.Error(), "has no history entry") {
			t.Errorf("entry %d: %v", n, err)
		}
	}
	ms := testSync()
	ms.Status.History[1].Inputs.Sources["repo"] = "resourceVersion:3"
	if _, err := Pin(ms, 1); err == nil || !strings.Contains(err.Error(), "names no commit") {
		t.Errorf("no commit: %v", err)
	}
}

func TestCommitOf(t *testing.T) {
	for rev, want := range map[string]string{
		"main@sha1:" + c1:     c1,
		"v1.2.0@sha1:abcdef0": "abcdef0",
		"sha1:" + c2:          c2,
		"HEAD@sha1:" + c1:     c1,
		"resourceVersion:12":  "",
		"main@sha1:xyz":       "",
	} {
		if got, _ := CommitOf(rev); got != want {
			t.Errorf("CommitOf(%q) = %q, want %q", rev, got, want)
		}
	}
}

func TestWrite(t *testing.T) {
	var out strings.Builder
	if err := Write(&out, testSync()); err != nil {
		t.Fatal(err)
	}
	want := `N  TIME                  RESULT  REVISION             SOURCES
0  2026-01-02T03:04:05Z  Synced  sha256:222222222222  base=main@sha1:222222222222 repo=main@sha1:222222222222 tls=resourceVersion:9
1  2026-01-02T03:04:05Z  Synced  sha256:111111111111  base=main@sha1:111111111111 repo=main@sha1:111111111111 tls=resourceVersion:5
`
	if out.String() != want {
		t.Errorf("got:\n%s\nwant:\n%s", out.String(), want)
	}
	if err := Write(&out, &v1alpha1.ManifestSync{}); err != ErrNoHistory {
		t.Errorf("no history: %v", err)
	}
}
