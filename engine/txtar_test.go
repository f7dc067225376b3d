package engine_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/txtar"
	"sigs.k8s.io/yaml"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/source"
)

var update = flag.Bool("update", false, "rewrite the out/ files of testdata/*.txtar")

// TestEvaluate runs every testdata/*.txtar case. An archive holds:
//
//	-- sync.yaml --          the ManifestSync
//	-- NAME/PATH --          a file of source NAME
//	-- NAME@root/PATH --     a file of the repository tree of git source
//	                         NAME (Snapshot.Root), whose files are then
//	                         those under its path
//	-- NAME.yaml --          the object of object source NAME, or the
//	                         objects object set source NAME selects from
//	-- refs/NAME.yaml --     the ConfigMap or Secret NAME a source's
//	                         substituteFrom (or valuesFrom) reads
//	-- out/TARGET.yaml --    what target TARGET gets
//	-- out/TARGET.error --   why target TARGET failed
//	-- out/error --          why the whole evaluation failed
//
// With -update the out/ files are rewritten from what the engine does.
func TestEvaluate(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no test cases")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) {
			t.Parallel()
			ar, err := txtar.ParseFile(file)
			if err != nil {
				t.Fatal(err)
			}
			got := evaluateArchive(t, ar)
			want := map[string]string{}
			var kept []txtar.File
			for _, f := range ar.Files {
				if strings.HasPrefix(f.Name, "out/") {
					want[f.Name] = string(f.Data)
				} else {
					kept = append(kept, f)
				}
			}
			if *update {
				for _, name := range sortedKeys(got) {
					kept = append(kept, txtar.File{Name: name, Data: []byte(got[name])})
				}
				ar.Files = kept
				if err := os.WriteFile(file, txtar.Format(ar), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			for _, name := range sortedKeys(want) {
				if _, ok := got[name]; !ok {
					t.Errorf("%s: missing from the result", name)
				}
			}
			for _, name := range sortedKeys(got) {
				w, ok := want[name]
				if !ok {
					t.Errorf("%s: unexpected; got:\n%s", name, got[name])
					continue
				}
				if w != got[name] {
					t.Errorf("%s: got:\n%s\nwant:\n%s", name, got[name], w)
				}
			}
		})
	}
}

// evaluateArchive evaluates the case and renders what came out as out/ files.
func evaluateArchive(t *testing.T, ar *txtar.Archive) map[string]string {
	t.Helper()
	byName := map[string][]byte{}
	for _, f := range ar.Files {
		byName[f.Name] = f.Data
	}
	sf, err := engine.LoadSyncFile("sync.yaml", byName["sync.yaml"])
	if err != nil {
		return map[string]string{"out/error": err.Error() + "\n"}
	}
	snaps := map[string]*engine.Snapshot{}
	for _, s := range sf.Sync.Spec.Sources {
		if data, ok := byName[s.Name+".yaml"]; ok && s.Objects != nil {
			set, err := engine.CompileObjectSet(s.Objects, sf.Sync.Namespace)
			if err != nil {
				return map[string]string{"out/error": err.Error() + "\n"}
			}
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "set.yaml"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			if snaps[s.Name], err = source.ObjectSetFileIn(dir, "set.yaml", set); err != nil {
				t.Fatalf("%s.yaml: %v", s.Name, err)
			}
			continue
		}
		if obj, ok := byName[s.Name+".yaml"]; ok {
			var m map[string]any
			if err := yaml.Unmarshal(obj, &m); err != nil {
				t.Fatalf("%s.yaml: %v", s.Name, err)
			}
			snaps[s.Name] = source.ObjectSnapshot(m)
			continue
		}
		files, root := map[string][]byte{}, map[string][]byte{}
		for name, data := range byName {
			if rel, ok := strings.CutPrefix(name, s.Name+"/"); ok {
				files[rel] = data
			}
			if rel, ok := strings.CutPrefix(name, s.Name+"@root/"); ok {
				root[rel] = data
				if rel, ok := strings.CutPrefix(rel, s.Git.Path+"/"); ok {
					files[rel] = data
				}
			}
		}
		if len(files) > 0 {
			snaps[s.Name] = &engine.Snapshot{Files: files, Revision: engine.ContentDigest(files)}
		}
		if len(root) > 0 {
			snaps[s.Name].Root = root
		}
	}
	for _, s := range sf.Sync.Spec.Sources {
		if err := readRefs(&s, snaps, byName); err != nil {
			return map[string]string{"out/error": err.Error() + "\n"}
		}
	}
	opts := engine.Options{}
	if nss, ok := byName["namespaces.yaml"]; ok {
		if err := yaml.Unmarshal(nss, &opts.Namespaces); err != nil {
			t.Fatalf("namespaces.yaml: %v", err)
		}
	}
	if nss, ok := byName["cluster-namespaces.yaml"]; ok {
		if err := yaml.Unmarshal(nss, &opts.ClusterNamespaces); err != nil {
			t.Fatalf("cluster-namespaces.yaml: %v", err)
		}
	}
	if lim, ok := byName["limits.yaml"]; ok {
		if err := yaml.Unmarshal(lim, &opts.Limits); err != nil {
			t.Fatalf("limits.yaml: %v", err)
		}
	}
	res, err := engine.Evaluate(context.Background(), engine.Spec{Sync: &sf.Sync.Spec, Snapshots: snaps}, opts)
	if err != nil {
		return map[string]string{"out/error": err.Error() + "\n"}
	}
	out := map[string]string{}
	for _, tr := range res.Targets {
		name := "out/" + strings.ReplaceAll(tr.ID(), "/", "_")
		if tr.Err != nil {
			out[name+".error"] = tr.Err.Error() + "\n"
			continue
		}
		var b bytes.Buffer
		for _, o := range tr.Objects {
			y, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatal(err)
			}
			b.WriteString("---\n")
			b.Write(y)
		}
		out[name+".yaml"] = b.String()
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// readRefs gives the snapshot of s the refs it reads from refs/NAME.yaml,
// as source.Resolver does (a kustomize source gets a snapshot of refs
// alone); one without a file is missing.
func readRefs(s *v1alpha1.Source, snaps map[string]*engine.Snapshot, byName map[string][]byte) error {
	refs := source.RefsOf(s)
	if len(refs) == 0 {
		return nil
	}
	data := map[string]map[string]string{}
	for _, ref := range refs {
		b, ok := byName["refs/"+ref.Name+".yaml"]
		if !ok {
			if ref.Optional {
				continue
			}
			return fmt.Errorf("source %q: %s: not found", s.Name, ref.Key())
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return err
		}
		m, err := source.RefData(obj)
		if err != nil {
			return err
		}
		data[ref.Key()] = m
	}
	snap := snaps[s.Name]
	if snap == nil {
		snap = &engine.Snapshot{Revision: "refs"}
		snaps[s.Name] = snap
	}
	snap.Refs = data
	return nil
}
