package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/source/git/gittest"
)

// gitEventNotes keeps the events a reconciler records, by reason.
type gitEventNotes struct {
	mu    sync.Mutex
	notes []string // "REASON: NOTE"
}

func (r *gitEventNotes) Eventf(_, _ runtime.Object, _, reason, _, note string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, reason+": "+fmt.Sprintf(note, args...))
}

func (r *gitEventNotes) AnnotatedEventf(regarding, related runtime.Object, _ map[string]string, eventtype, reason, action, note string, args ...any) {
	r.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

func (r *gitEventNotes) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.notes...)
}

// A git source with verify: a commit signed by a key of its Secret is
// applied; an unsigned commit pushed after it on the same branch, and then
// one signed by another key, are refused with reason SourceVerifyFailed
// and a SourceVerifyFailed event naming the commit and the Secret, and
// nothing of them is applied: the objects of the signed commit stay as
// they were. A signed commit pushed next is applied. No key appears in
// the status or the events.
//
// What a hostile pusher gets (write access to the repository, not the
// key): their commits are never applied, and the sync reports it.
func TestGitVerify(t *testing.T) {
	env.Need(t)
	events := &gitEventNotes{}
	ownOperator(t, func(r *Reconciler, mgr ctrl.Manager) error {
		r.Git = NewGitCache(git.Options{Timeout: 20 * time.Second}).Provider
		r.Recorder = events
		return nil
	})
	ctx := context.Background()
	ns := remoteEnv.Namespace(t, nil)

	content := t.TempDir()
	if err := os.WriteFile(filepath.Join(content, "README"), []byte("config\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	gittest.Publish(t, root, "config", content)
	url := gittest.Daemon(t, root) + "/config.git"
	work := gittest.Clone(t, filepath.Join(root, "config.git"))
	key, other := gittest.NewSSHKey(t), gittest.NewSSHKey(t)
	pgp := gittest.NewPGPKey(t, "release")

	cm := func(name, v string) string {
		return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: %s}\ndata: {v: %q}\n", name, v)
	}
	work.Write(map[string]string{"deploy/app.yaml": cm("app", "1")})
	signed := work.Commit("signed", key)

	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "git-keys", Namespace: ns},
		Data:       map[string][]byte{"ops.pub": []byte(key.Authorized + "\n"), "release.asc": []byte(pgp.Armored)},
	}
	if err := remoteEnv.Client.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}
	ms := newSync(ns, "verified", v1alpha1.ManifestSyncSpec{
		Interval: &metav1.Duration{Duration: time.Second},
		Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{
			URL: url, Ref: v1alpha1.GitRef{Branch: "main"}, Path: "deploy",
			Verify: &v1alpha1.GitVerification{Mode: "HEAD", SecretRef: v1alpha1.LocalObjectReference{Name: "git-keys"}},
		}}},
		Targets: targets(ns),
	})
	remoteEnv.CreateSync(t, ms, timeout)
	key0 := client.ObjectKeyFromObject(ms)
	waitSync(t, key0, v1alpha1.ReasonSynced, func(ms *v1alpha1.ManifestSync, _ string) error {
		if !strings.Contains(statusJSON(t, ms), signed) {
			return fmt.Errorf("synced, not yet at the signed commit %s", signed)
		}
		return nil
	})
	wantApp := func(v string) {
		t.Helper()
		var c corev1.ConfigMap
		if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "app"}, &c); err != nil || c.Data["v"] != v {
			t.Fatalf("ConfigMap app: %v, data %v; want v=%s", err, c.Data, v)
		}
		var extra corev1.ConfigMap
		if err := remoteEnv.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "extra"}, &extra); err == nil {
			t.Fatalf("ConfigMap extra, of a refused commit, was applied")
		}
	}
	wantApp("1")

	refused := func(commit, why string) {
		t.Helper()
		got := waitSync(t, key0, v1alpha1.ReasonSourceVerifyFailed, func(_ *v1alpha1.ManifestSync, msg string) error {
			if !strings.Contains(msg, "commit "+commit) {
				return fmt.Errorf("Ready says %q, not of commit %s", msg, commit)
			}
			return nil
		})
		msg := condition(got, v1alpha1.ConditionReady).Message
		if !strings.Contains(msg, `source "repo"`) || !strings.Contains(msg, "Secret "+ns+"/git-keys") || !strings.Contains(msg, why) {
			t.Errorf("Ready message %q: want the source, the Secret and %q", msg, why)
		}
		if c := condition(got, v1alpha1.ConditionReconciling); c.Status != metav1.ConditionTrue {
			t.Errorf("Reconciling is %s; want True (a signed commit may follow)", c.Status)
		}
		eventually(t, 10*time.Second, func() error {
			for _, n := range events.all() {
				if strings.HasPrefix(n, EventSourceVerifyFailed+": ") && strings.Contains(n, "commit "+commit) {
					return nil
				}
			}
			return fmt.Errorf("no %s event of commit %s: %q", EventSourceVerifyFailed, commit, events.all())
		})
		// Nothing of the refused commit is applied; the last good state
		// stays.
		wantApp("1")
	}
	fetches := func(result string) float64 {
		return testutil.ToFloat64(gitFetchesTotal.WithLabelValues(ns, ms.Name, "repo", result))
	}
	failures := func() float64 {
		return testutil.ToFloat64(failuresTotal.WithLabelValues(ns, ms.Name, "", v1alpha1.ReasonSourceVerifyFailed))
	}

	work.Write(map[string]string{"deploy/app.yaml": cm("app", "2"), "deploy/extra.yaml": cm("extra", "x")})
	unsigned := work.Commit("unsigned", nil)
	refused(unsigned, "not signed")

	work.Write(map[string]string{"deploy/app.yaml": cm("app", "3")})
	byOther := work.Commit("by another key", other)
	refused(byOther, "signed by a key that is not in the Secret")
	if fetches("unsigned") < 1 || fetches("unknown_signer") < 1 || failures() < 2 {
		t.Errorf("metrics: git fetches unsigned %v, unknown_signer %v; failures SourceVerifyFailed %v; want at least 1, 1 and 2",
			fetches("unsigned"), fetches("unknown_signer"), failures())
	}

	// No key of the Secret, nor any part of one, in the status or the
	// events.
	st := statusJSON(t, waitSync(t, key0, v1alpha1.ReasonSourceVerifyFailed, nil))
	for _, part := range append(strings.Fields(key.Authorized)[:2], strings.Split(strings.TrimSpace(pgp.Armored), "\n")[2]) {
		if strings.Contains(st, part) || strings.Contains(strings.Join(events.all(), "\n"), part) {
			t.Errorf("key material %q in the status or the events", part)
		}
	}

	// A commit signed with the OpenPGP key of the Secret is applied.
	work.Write(map[string]string{"deploy/app.yaml": cm("app", "4"), "deploy/extra.yaml": ""})
	if err := os.Remove(filepath.Join(work.Dir, "deploy/extra.yaml")); err != nil {
		t.Fatal(err)
	}
	good := work.Commit("signed again", pgp)
	waitSync(t, key0, v1alpha1.ReasonSynced, func(ms *v1alpha1.ManifestSync, _ string) error {
		if !strings.Contains(statusJSON(t, ms), good) {
			return fmt.Errorf("synced, not yet at %s", good)
		}
		return nil
	})
	wantApp("4")
}

// waitSync waits, at most a minute, until the ManifestSync key of the
// second API server is Ready with reason of its generation and check
// (given it and Ready's message; nil checks nothing) holds.
func waitSync(t *testing.T, key client.ObjectKey, reason string, check func(ms *v1alpha1.ManifestSync, msg string) error) *v1alpha1.ManifestSync {
	t.Helper()
	ms := &v1alpha1.ManifestSync{}
	eventually(t, time.Minute, func() error {
		if err := remoteEnv.Client.Get(context.Background(), key, ms); err != nil {
			return err
		}
		c := condition(ms, v1alpha1.ConditionReady)
		if c.Reason != reason || c.ObservedGeneration != ms.Generation {
			return fmt.Errorf("Ready is %s (%s): %s; want %s", c.Status, c.Reason, c.Message, reason)
		}
		if check != nil {
			return check(ms, c.Message)
		}
		return nil
	})
	return ms
}

func statusJSON(t *testing.T, ms *v1alpha1.ManifestSync) string {
	t.Helper()
	b, err := json.Marshal(ms.Status)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The keys of verify are read as the ManifestSync's service account, as
// its credentials are: an account that may not read the Secret gets
// SourceFailed naming the Secret and the refusal (never a read of the
// commit unverified, nor the Secret's data); granted, the signed commit
// syncs.
func TestGitVerifyKeysReadAsServiceAccount(t *testing.T) {
	env.Need(t)
	ownOperator(t, func(r *Reconciler, mgr ctrl.Manager) error {
		r.Git = NewGitCache(git.Options{Timeout: 20 * time.Second}).Provider
		return nil
	})
	ctx := context.Background()
	ns := remoteEnv.Namespace(t, nil)
	content := t.TempDir()
	if err := os.WriteFile(filepath.Join(content, "cm.yaml"), []byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app}\ndata: {v: signed}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	gittest.Publish(t, root, "config", content)
	url := gittest.Daemon(t, root) + "/config.git"
	work := gittest.Clone(t, filepath.Join(root, "config.git"))
	key := gittest.NewSSHKey(t)
	signed := work.Commit("signed", key)

	for _, obj := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "puller"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "git-keys"}, Data: map[string][]byte{"k.pub": []byte(key.Authorized)}},
	} {
		if err := remoteEnv.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	ms := newSync(ns, "verified", v1alpha1.ManifestSyncSpec{
		Sources: []v1alpha1.Source{{Name: "repo", Git: &v1alpha1.GitSource{
			URL: url, Ref: v1alpha1.GitRef{Branch: "main"},
			Verify: &v1alpha1.GitVerification{SecretRef: v1alpha1.LocalObjectReference{Name: "git-keys"}},
		}}},
		Targets:            targets(ns),
		ServiceAccountName: "puller",
	})
	remoteEnv.CreateSync(t, ms, timeout)
	key0 := client.ObjectKeyFromObject(ms)
	waitSync(t, key0, v1alpha1.ReasonSourceFailed, func(_ *v1alpha1.ManifestSync, msg string) error {
		if !strings.Contains(msg, `source "repo": verify: secretRef `+ns+"/git-keys") || !strings.Contains(msg, "forbidden") ||
			!strings.Contains(msg, `"system:serviceaccount:`+ns+`:puller"`) {
			return fmt.Errorf("Ready message %q, want the keys' Secret forbidden to the account", msg)
		}
		return nil
	})

	for _, resource := range []string{"secrets", "configmaps"} {
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "puller-" + resource},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{resource}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}},
		}
		binding := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "puller-" + resource},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "puller"}},
		}
		for _, obj := range []client.Object{role, binding} {
			if err := remoteEnv.Client.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitSync(t, key0, v1alpha1.ReasonSynced, func(ms *v1alpha1.ManifestSync, _ string) error {
		if !strings.Contains(statusJSON(t, ms), signed) {
			return fmt.Errorf("synced, not at the signed commit %s", signed)
		}
		return nil
	})
}
