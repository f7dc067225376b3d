package main

import (
	"encoding/base64"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/rand"
)

// stringDataSecretYAML is a Secret "creds" written with stringData.
func stringDataSecretYAML(token string) string {
	return "apiVersion: v1\nkind: Secret\nmetadata: {name: creds}\ntype: Opaque\nstringData: {token: " + token + "}\n"
}

// noneShown fails t when out shows a value, plain or base64.
func noneShown(t *testing.T, out string, values ...string) {
	t.Helper()
	for _, v := range values {
		for _, s := range []string{v, base64.StdEncoding.EncodeToString([]byte(v))} {
			if strings.Contains(out, s) {
				t.Errorf("the output shows %q", s)
			}
		}
	}
}

// A Secret written with stringData is diffed as the operator applies it,
// stringData merged into data: in sync once synced, and a changed value is
// a changed data key, masked.
func TestDiffStringDataSecret(t *testing.T) {
	env := needCluster(t)
	dir, ns := newSyncDir(t, env, map[string]string{"secret.yaml": stringDataSecretYAML("old-t0ken-value")})
	syncDir(t, env, dir)
	code, stdout, stderr := diff(t, dir)
	if code != 0 || stdout != "" || stderr != "" {
		t.Errorf("in sync: exit %d, stdout %q, stderr %q; want 0 and nothing", code, stdout, stderr)
	}

	writeFiles(t, filepath.Join(dir, "repo"), map[string]string{"secret.yaml": stringDataSecretYAML("new-t0ken-value")})
	code, stdout, stderr = diff(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantContains(t, stdout,
		"# dev: Secret "+ns+"/creds: would be configured\n",
		" data:\n-  token: '*** (before)'\n+  token: '*** (after)'\n")
	if strings.Contains(stdout, "stringData") {
		t.Errorf("the diff shows stringData, which the API server never keeps:\n%s", stdout)
	}
	noneShown(t, stdout+stderr, "old-t0ken-value", "new-t0ken-value")
}

// A stringData Secret in a namespace the sync creates first is shown as
// it would be sent: its stringData as data, masked.
func TestDiffStringDataSecretNewNamespace(t *testing.T) {
	env := needCluster(t)
	dir, _ := newSyncDir(t, env, nil)
	ns := "t-new-" + rand.String(6)
	writeFiles(t, dir, map[string]string{
		"sync.yaml":        fmt.Sprintf(syncYAML, ns),
		"repo/ns.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata: {name: " + ns + "}\n",
		"repo/secret.yaml": stringDataSecretYAML("created-t0ken-value"),
	})
	code, stdout, stderr := diff(t, dir)
	if code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
	wantContains(t, stdout, "# dev: Secret "+ns+"/creds: would be created\n", "+data:\n+  token: '*** (after)'\n")
	if strings.Contains(stdout, "stringData") {
		t.Errorf("the diff shows stringData:\n%s", stdout)
	}
	noneShown(t, stdout+stderr, "created-t0ken-value")
}
