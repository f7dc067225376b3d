package main

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/manifestsync/manifestsync/internal/doccmd"
)

// notRun are the commands of README.md and docs/ that no unit test can
// run, each with the reason. TestDocs fails when one of them is no longer
// in the documentation, so that the list never keeps a command nobody
// documents.
var notRun = map[string]string{
	"make demo": "builds and starts a control plane for minutes; hack/demo's TestDemo runs the demo",
	"make test": "runs every test of the repository, this one included",
	"helm install manifestsync operator/chart -n manifestsync-system --create-namespace --set image.repository=REGISTRY/engine --set image.tag=TAG": "installs into the user's cluster, with the user's image; operator/config's chart tests render the chart",
	"kubectl -n manifestsync-system rollout status deployment/manifestsync":                                                                         "waits on the user's cluster",
	"kubectl kustomize operator/config/default | kubectl apply --server-side -f -":                                                                  "applies to the user's cluster; operator/config's tests build the layout",
	"kubectl get msync -A":                             "reads the user's cluster, with kubectl, which the project does not provide",
	"kubectl get msync -A -o wide":                     "reads the user's cluster, with kubectl, which the project does not provide",
	"engine status -n NS NAME":                         "reads a ManifestSync of the user's cluster; the tour's status commands run against the demo's",
	"kubectl get namespaces -o yaml > namespaces.yaml": "reads the user's cluster, with kubectl, which the project does not provide",
}

// engineCommand matches a command each of whose parts (between |, &&, ||
// and ;) runs the engine: engine, bin/engine or go run ./cmd/engine.
var (
	commandParts  = regexp.MustCompile(`\|\||&&|\||;`)
	enginePrefix  = regexp.MustCompile(`^(engine|bin/engine|go run \./cmd/engine)(\s|$)`)
	goRunEngine   = regexp.MustCompile(`(^|\s)go run \./cmd/engine(\s|$)`)
	docsCopyNames = []string{"bin", ".git"}
)

// TestDocs runs every command of README.md and docs/ (see package doccmd)
// that needs no cluster, and checks that it exits as the page says. The
// commands of each page run in order, as a reader follows the page, in a
// copy of the repository of their own (a git repository of one commit, so
// that diff --base HEAD has a revision), from its root, with the engine
// this test binary provides: `go run ./cmd/engine` runs it, as do `engine`
// and `bin/engine`. The commands that talk to the demo's cluster (they
// name bin/demo/kubeconfig) are hack/demo's TestDemo's to run; those no
// test can run are listed in notRun with the reason.
func TestDocs(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmds, err := doccmd.FromRepo(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(cmds) < 30 {
		t.Fatalf("found %d commands in README.md and docs/, want at least 30", len(cmds))
	}
	engineBin, err := exec.LookPath(programName)
	if err != nil {
		t.Fatalf("no %s on $PATH (testscript's TestMain puts this test binary there): %v", programName, err)
	}
	base := docsRepo(t, root)

	byFile := map[string][]doccmd.Command{}
	var files []string
	listed := map[string]bool{}
	for _, c := range cmds {
		if _, ok := notRun[c.Text]; ok {
			listed[c.Text] = true
			continue
		}
		if c.Cluster {
			// hack/demo's TestDemo runs it with the bin/engine the demo
			// builds: it can run nothing else.
			if !runsEngine(c.Text) {
				t.Errorf("%s: names %s but does not run the engine, which is all the demo's test can run", c, doccmd.DemoKubeconfig)
			}
			continue
		}
		if !runsEngine(c.Text) {
			t.Errorf("%s: neither runs the engine nor is listed in notRun with the reason no test can run it", c)
			continue
		}
		if byFile[c.File] == nil {
			files = append(files, c.File)
		}
		byFile[c.File] = append(byFile[c.File], c)
	}
	for text := range notRun {
		if !listed[text] {
			t.Errorf("notRun lists %q, which no page of README.md or docs/ has any more", text)
		}
	}
	for _, file := range files {
		t.Run(strings.ReplaceAll(file, "/", "_"), func(t *testing.T) {
			work := filepath.Join(t.TempDir(), "repo")
			gitRun(t, "", "clone", "-q", base, work)
			if err := os.MkdirAll(filepath.Join(work, "bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			// testscript runs this binary as the engine by the name it is
			// started with.
			if err := os.Symlink(engineBin, filepath.Join(work, "bin", programName)); err != nil {
				t.Fatal(err)
			}
			env := append(os.Environ(),
				"PATH="+filepath.Join(work, "bin")+string(os.PathListSeparator)+os.Getenv("PATH"),
				"XDG_CACHE_HOME="+t.TempDir(), "NO_COLOR=1")
			for _, c := range byFile[file] {
				text := goRunEngine.ReplaceAllString(c.Text, "${1}engine${2}")
				cmd := exec.Command("sh", "-c", text)
				cmd.Dir, cmd.Env = work, env
				out, err := cmd.CombinedOutput()
				code := 0
				var ee *exec.ExitError
				if errors.As(err, &ee) {
					code = ee.ExitCode()
				} else if err != nil {
					t.Fatalf("%s: %v", c, err)
				}
				if code != c.Exit {
					t.Errorf("%s: exit %d, the page says %d:\n%s", c, code, c.Exit, tail(out, 20))
				}
			}
		})
	}
}

// runsEngine reports whether every part of the command text runs the
// engine.
func runsEngine(text string) bool {
	for _, part := range commandParts.Split(text, -1) {
		if !enginePrefix.MatchString(strings.TrimSpace(part)) {
			return false
		}
	}
	return true
}

// docsRepo copies the repository at root, but for bin/ and .git, into a
// git repository of one commit, and returns its directory.
func docsRepo(t *testing.T, root string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "base")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		if d.IsDir() {
			for _, skip := range docsCopyNames {
				if rel == skip {
					return filepath.SkipDir
				}
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil // symlinks and the like: the commands need none
		}
		return copyFile(path, filepath.Join(dst, rel))
	})
	if err != nil {
		t.Fatalf("copying the repository: %v", err)
	}
	gitRun(t, dst, "init", "-q")
	gitRun(t, dst, "add", ".")
	gitRun(t, dst, "commit", "-q", "-m", "docs test")
	return dst
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	info, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// gitRun runs git in dir with no user or system configuration.
func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=docs", "-c", "user.email=docs@example.com", "-c", "init.defaultBranch=main"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// tail returns the last n lines of out.
func tail(out []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{"... (" + strconv.Itoa(len(lines)-n) + " lines before)"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}
