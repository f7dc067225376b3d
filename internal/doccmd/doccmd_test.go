package doccmd

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// page is a Markdown page with every kind of block and line the package
// tells apart.
const page = "# Title\n" + // 1
	"\n" + // 2
	"```sh\n" + // 3
	"# a comment line is no command\n" + // 4
	"engine eval -f sync.yaml   # render it\n" + // 5
	"\n" + // 6
	"engine vet examples/       # exit 1: a finding on purpose\n" + // 7
	"helm install x chart \\\n" + // 8
	"  --set a=b \\\n" + // 9
	"  --set c='#d'             # exit 2\n" + // 10
	"echo \"a # b\" x#y\n" + // 11
	"bin/engine status --kubeconfig bin/demo/kubeconfig\n" + // 12
	"```\n" + // 13
	"```console\n" + // 14
	"$ engine status\n" + // 15
	"```\n" + // 16
	"```yaml\n" + // 17
	"kind: ManifestSync\n" + // 18
	"```\n" + // 19
	"- a list item:\n" + // 20
	"  ```sh\n" + // 21
	"  engine test app\n" + // 22
	"  ```\n" + // 23
	"```\n" + // 24
	"engine not-sh\n" + // 25
	"```\n" // 26

func TestParse(t *testing.T) {
	got, err := parse("docs/x.md", page)
	if err != nil {
		t.Fatal(err)
	}
	want := []Command{
		{File: "docs/x.md", Line: 5, Text: "engine eval -f sync.yaml"},
		{File: "docs/x.md", Line: 7, Text: "engine vet examples/", Exit: 1},
		{File: "docs/x.md", Line: 8, Text: "helm install x chart --set a=b --set c='#d'", Exit: 2},
		{File: "docs/x.md", Line: 11, Text: `echo "a # b" x#y`},
		{File: "docs/x.md", Line: 12, Text: "bin/engine status --kubeconfig bin/demo/kubeconfig", Cluster: true},
		{File: "docs/x.md", Line: 22, Text: "engine test app"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", dump(got), dump(want))
	}
}

func dump(cmds []Command) string {
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "%s (exit %d, cluster %t)\n", c, c.Exit, c.Cluster)
	}
	return b.String()
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unclosed block", "x\n```sh\nengine eval\n", "f.md:2: code block is never closed"},
		{"dangling continuation", "```sh\nengine eval \\\n```\n", "f.md:2: command ends in a backslash"},
		{"exit code out of range", "```sh\nengine eval # exit 300\n```\n", `f.md:2: exit code "300"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse("f.md", tc.text)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestFromRepo(t *testing.T) {
	root := t.TempDir()
	write := func(rel, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("README.md", "```sh\nmake demo\n```\n")
	write("docs/b.md", "```sh\nengine b\n```\n")
	write("docs/a.md", "```sh\nengine a\n```\n")
	write("docs/sub/c.md", "```sh\nengine c\n```\n")
	write("docs/schema.json", "```sh\nengine json\n```\n")
	write("other.md", "```sh\nengine other\n```\n")
	got, err := FromRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, c := range got {
		texts = append(texts, c.File+" "+c.Text)
	}
	want := []string{"README.md make demo", "docs/a.md engine a", "docs/b.md engine b", "docs/sub/c.md engine c"}
	if !reflect.DeepEqual(texts, want) {
		t.Errorf("got %q, want %q", texts, want)
	}
	if _, err := FromFile(root, "missing.md"); err == nil || !strings.Contains(err.Error(), "missing.md") {
		t.Errorf("FromFile of a missing file: error %v, want one naming it", err)
	}
}
