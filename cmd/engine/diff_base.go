package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine"
	"github.com/manifestsync/manifestsync/engine/redact"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/engine/source/git"
	"github.com/manifestsync/manifestsync/engine/worker"
	"github.com/manifestsync/manifestsync/internal/objdiff"
	"github.com/manifestsync/manifestsync/internal/plural"
)

// diff --base renders every ManifestSync under some paths twice, at a
// commit of their repository and in the working tree, and compares the
// two renders object by object. Each side reads the sync files and the
// local copies of sources from its own tree (the commit's through
// git.Commit, never through a checkout); both evaluate in the one worker
// of the command, bounded as eval's.

// commitTree is the source.Tree of a commit: paths of the file system are
// read from the commit, at their place relative to the repository's root.
type commitTree struct {
	c   *git.Commit
	rev string // as given, to name files in messages: REV:path
}

func (t commitTree) Exists(p string) bool {
	rel, err := t.c.Rel(p)
	if err != nil {
		return false
	}
	_, err = t.c.IsDir(rel)
	return err == nil
}

func (t commitTree) Read(dir, name string, object bool) (*engine.Snapshot, error) {
	rel, err := t.c.Rel(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	isDir, err := t.c.IsDir(rel)
	if err != nil {
		return nil, err
	}
	if isDir {
		return t.c.Dir(rel, t.rev+":"+rel, source.Limits{})
	}
	b, err := t.c.ReadFile(rel)
	if err != nil {
		return nil, err
	}
	if object {
		return source.ObjectBytes(t.rev+":"+rel, b)
	}
	files := map[string][]byte{path.Base(rel): b}
	return &engine.Snapshot{Files: files, Revision: engine.ContentDigest(files)}, nil
}

// side is one of the two renders: where it reads files from.
type side struct {
	name string      // "base" or "worktree", in diff headers
	tree source.Tree // the local copies of sources
	// candidates lists the YAML files under paths; readFile reads one.
	candidates func(paths []string) ([]candidate, error)
	readFile   func(p string) ([]byte, error)
}

// workSide is the working tree.
func workSide() side {
	return side{
		name: "worktree",
		tree: source.WorkTree{},
		candidates: func(paths []string) ([]candidate, error) {
			var present []string
			for _, p := range paths {
				if _, err := os.Stat(p); err == nil {
					present = append(present, p)
				}
			}
			files, errs := findCandidates(present)
			return files, errors.Join(errs...)
		},
		readFile: source.ReadRegularFile,
	}
}

// commitSide is the commit c.
func commitSide(c *git.Commit, rev string) side {
	return side{
		name: "base",
		tree: commitTree{c: c, rev: rev},
		candidates: func(paths []string) ([]candidate, error) {
			var out []candidate
			for _, p := range paths {
				rel, err := c.Rel(p)
				if err != nil {
					return nil, err
				}
				isDir, err := c.IsDir(rel)
				switch {
				case errors.Is(err, fs.ErrNotExist):
					continue
				case err != nil:
					return nil, err
				case !isDir:
					out = append(out, candidate{path: filepath.Clean(p), named: true})
					continue
				}
				files, err := c.Files(rel)
				if err != nil {
					return nil, err
				}
				for _, f := range files {
					if strings.HasSuffix(f, ".yaml") || strings.HasSuffix(f, ".yml") {
						within := strings.TrimPrefix(strings.TrimPrefix(f, rel), "/")
						if rel == "" {
							within = f
						}
						out = append(out, candidate{path: filepath.Join(p, filepath.FromSlash(within))})
					}
				}
			}
			return out, nil
		},
		readFile: func(p string) ([]byte, error) {
			rel, err := c.Rel(p)
			if err != nil {
				return nil, err
			}
			return c.ReadFile(rel)
		},
	}
}

// rendered is one ManifestSync evaluated on one side.
type rendered struct {
	sf  *engine.SyncFile
	res *engine.Result
}

// renderer evaluates the ManifestSyncs of both sides.
type renderer struct {
	pool       *worker.Pool
	opts       engine.Options
	sources    map[string]string // --source, by name
	keys       sopsKeyFile       // --sops-age-key-file, SOPS_AGE_KEY_FILE
	namespaces givenNamespaces
	overridden map[string]bool // --source names some ManifestSync has
}

// render evaluates every ManifestSync under paths on side s, by file and
// namespace/name (two files may hold ManifestSyncs of one name: examples
// of one, or the same one for two clusters). A ManifestSync whose evaluation fails is an error; a
// failed target is left in its result for the comparison to report.
func (r *renderer) render(ctx context.Context, s side, paths []string) (map[string]*rendered, error) {
	cands, err := s.candidates(paths)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.name, err)
	}
	out := map[string]*rendered{}
	for _, c := range cands {
		rctx, timeout, cancel := readDeadline(ctx, r.opts.Limits.Timeout)
		data, err := readWithin(rctx, timeout, c.path, func(context.Context) ([]byte, error) { return s.readFile(c.path) })
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		syncs, err := loadSyncs(c, data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		for _, sf := range syncs {
			key := filepath.ToSlash(filepath.Clean(sf.Name)) + "\x00" + syncKey(sf.Sync)
			if _, dup := out[key]; dup {
				return nil, fmt.Errorf("%s: %s: ManifestSync %s is there twice", s.name, sf.Name, syncKey(sf.Sync))
			}
			res, err := r.evaluate(ctx, s, sf)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			out[key] = &rendered{sf: sf, res: res}
		}
	}
	return out, nil
}

// evaluate evaluates one ManifestSync as eval does, with the namespaces
// of --namespaces and --namespace or, without them, one namespace made up
// for each namespaceSelector target, as vet does.
func (r *renderer) evaluate(ctx context.Context, s side, sf *engine.SyncFile) (*engine.Result, error) {
	for _, src := range sf.Sync.Spec.Sources {
		if _, ok := r.sources[src.Name]; ok {
			r.overridden[src.Name] = true
		}
	}
	rctx, timeout, cancel := readDeadline(ctx, r.opts.Limits.Timeout)
	defer cancel()
	snaps, err := readWithin(rctx, timeout, sf.Name+": reading its sources", func(ctx context.Context) (map[string]*engine.Snapshot, error) {
		return readSourcesIn(ctx, s.tree, sf, r.sources, r.keys)
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sf.Name, err)
	}
	opts := r.opts
	opts.Namespaces = r.namespaces.local
	if opts.Namespaces == nil {
		opts.Namespaces = offlineNamespaces(&sf.Sync.Spec)
	}
	opts.ClusterNamespaces = r.namespaces.options(&sf.Sync.Spec, opts.Namespaces)
	res, err := r.pool.Evaluate(ctx, engine.Spec{Sync: &sf.Sync.Spec, Snapshots: snaps, Name: sf.Sync.Name}, opts)
	if err, ok := killed(sf.Name, err); ok {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", sf.Name, err)
	}
	return res, nil
}

// loadSyncs decodes the ManifestSyncs of a candidate file. A file found by
// walking that is not YAML, or holds no ManifestSync, is skipped unless it
// looks like a ManifestSync (as vet skips it).
func loadSyncs(c candidate, data []byte) ([]*engine.SyncFile, error) {
	if !c.named && !bytes.Contains(data, []byte(v1alpha1.Kind)) {
		return nil, nil
	}
	syncs, err := engine.LoadSyncFiles(c.path, data)
	if err != nil && !c.named && !kindLine.Match(data) {
		return nil, nil
	}
	if err == nil && c.named && len(syncs) == 0 {
		err = fmt.Errorf("%s: %w", c.path, errNoSync)
	}
	return syncs, err
}

// syncKey names a ManifestSync: "namespace/name", or "name".
func syncKey(ms *v1alpha1.ManifestSync) string {
	return namespacedName(ms.Namespace, ms.Name)
}

// namespacedName is "namespace/name", or "name" without a namespace.
func namespacedName(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// runDiffBase is engine diff --base.
func runDiffBase(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, f *diffFlags, paths []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	write, ok := baseFormats[f.output]
	if !ok {
		return usageErr("diff: -o %q: want text, markdown or json", f.output)
	}
	if f.file != "" {
		paths = append(paths, f.file)
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	sources, err := parseSourceFlags(f.sources)
	if err != nil {
		return err
	}
	namespaces, err := f.namespaces.load(ctx, f.limits.Timeout, stdin)
	if err != nil {
		return err
	}
	c, err := git.OpenCommit(existingDir(paths[0]), f.base)
	if err != nil {
		return usageErr("diff: --base %s: %w", f.base, err)
	}
	for _, p := range paths {
		if !(source.WorkTree{}).Exists(p) && !(commitTree{c: c}).Exists(p) {
			return usageErr("diff: %s: neither in the working tree nor at %s", p, f.base)
		}
	}
	pool, stop, err := newSandbox("diff", f.maxMemory, f.limits.Timeout)
	if err != nil {
		return err
	}
	defer stop()
	r := &renderer{pool: pool, opts: engine.Options{Limits: f.limits}, sources: sources, keys: sopsKeys(f.sopsKeyFile), namespaces: namespaces, overridden: map[string]bool{}}
	if err := f.caps.options("diff", &r.opts); err != nil {
		return err
	}
	base, err := r.render(ctx, commitSide(c, f.base), paths)
	if err != nil {
		return usageErr("diff: %w", err)
	}
	head, err := r.render(ctx, workSide(), paths)
	if err != nil {
		return usageErr("diff: %w", err)
	}
	if len(base) == 0 && len(head) == 0 {
		return usageErr("diff: no ManifestSync found in %v, at %s or in the working tree", paths, f.base)
	}
	for _, name := range slices.Sorted(maps.Keys(sources)) {
		if !r.overridden[name] {
			return usageErr("diff: --source %s=%s: no ManifestSync has a source named %q", name, sources[name], name)
		}
	}
	rep, err := compareRenders(f.base, c.Hash, base, head)
	if err != nil {
		return usageErr("diff: %w", err)
	}
	if err := write(stdout, rep); err != nil {
		return usageErr("diff: writing the report: %w", err)
	}
	added, removed, changed := rep.totals()
	for _, e := range rep.Errors {
		fmt.Fprintf(stderr, "%s: diff: %s\n", programName, e)
	}
	switch {
	case len(rep.Errors) > 0:
		return usageErr("diff: %s", plural.Count(len(rep.Errors), "error"))
	case added+removed+changed > 0:
		return failed(fmt.Errorf("diff: %d added, %d removed, %d changed against %s", added, removed, changed, f.base))
	}
	fmt.Fprintf(stderr, "%s: diff: no changes against %s in %s\n", programName, f.base, plural.Count(len(head), "ManifestSync"))
	return nil
}

// existingDir is the nearest directory of p that exists in the working
// tree: p may be a path deleted since the base.
func existingDir(p string) string {
	for {
		if info, err := os.Stat(p); err == nil {
			if info.IsDir() {
				return p
			}
			return filepath.Dir(p)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return "."
		}
		p = parent
	}
}

// compareRenders compares the renders of every ManifestSync of both
// sides. Secret values, of either side, are masked everywhere.
func compareRenders(base, commit string, before, after map[string]*rendered) (*baseReport, error) {
	red := redact.New()
	for _, side := range []map[string]*rendered{before, after} {
		for _, r := range side {
			red.Merge(r.res.Redactor)
		}
	}
	rep := &baseReport{Base: base, Commit: commit, Syncs: []*syncDiff{}, Errors: []string{}}
	keys := union(before, after)
	slices.Sort(keys)
	for _, k := range keys {
		b, a := before[k], after[k]
		sd := &syncDiff{Status: statusChanged}
		var bres, ares *engine.Result
		switch {
		case b == nil:
			sd.Status, sd.File, ares = statusAdded, a.sf.Name, a.res
		case a == nil:
			sd.Status, sd.File, bres = statusRemoved, b.sf.Name, b.res
		default:
			sd.File, bres, ares = a.sf.Name, b.res, a.res
		}
		ms := pick(b, a).sf.Sync
		sd.Name, sd.Namespace = ms.Name, ms.Namespace
		targets, err := diffResults(bres, ares, red)
		if err != nil {
			return nil, fmt.Errorf("%s: ManifestSync %s: %w", sd.File, sd.displayName(), err)
		}
		sd.Targets = targets
		for _, t := range targets {
			if t.Error != "" {
				rep.Errors = append(rep.Errors, fmt.Sprintf("%s: ManifestSync %s: %s", sd.File, sd.displayName(), t.Error))
			}
		}
		if sd.Status == statusChanged && !sd.changes() {
			sd.Status = statusUnchanged
		}
		rep.Syncs = append(rep.Syncs, sd)
	}
	return rep, nil
}

// union lists the keys of a and b, each once, in no order.
func union[K comparable, V any](a, b map[K]V) []K {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	return keys
}

// pick is the first of a and b that is set.
func pick(a, b *rendered) *rendered {
	if a != nil {
		return a
	}
	return b
}

// Changes of ManifestSyncs, targets and objects.
const (
	statusAdded     = "added"
	statusRemoved   = "removed"
	statusChanged   = "changed"
	statusUnchanged = "unchanged"
)

// diffResults compares two renders of one ManifestSync, target by target
// (by TargetResult.ID) and object by object (by kind, group, namespace and
// name); either may be nil, a ManifestSync that is not on that side. The
// diffs mask values as objdiff.Write does. A target that failed on either side has its
// error, redacted, and no objects.
func diffResults(before, after *engine.Result, red *redact.Redactor) ([]*targetDiff, error) {
	targets := func(r *engine.Result) map[string]*engine.TargetResult {
		out := map[string]*engine.TargetResult{}
		if r != nil {
			for _, t := range r.Targets {
				out[t.ID()] = t
			}
		}
		return out
	}
	bt, at := targets(before), targets(after)
	ids := union(bt, at)
	slices.Sort(ids)
	var out []*targetDiff
	for _, id := range ids {
		b, a := bt[id], at[id]
		td := &targetDiff{Target: id, Objects: []*objectDiff{}}
		out = append(out, td)
		var errs []string
		for _, side := range []struct {
			name string
			t    *engine.TargetResult
		}{{"base", b}, {"worktree", a}} {
			if side.t != nil && side.t.Err != nil {
				errs = append(errs, side.name+": "+red.String(side.t.Err.Error()))
			}
		}
		if len(errs) > 0 {
			td.Error = strings.Join(errs, "\n")
			continue
		}
		objs := func(t *engine.TargetResult) map[v1alpha1.ObjectID]*unstructured.Unstructured {
			m := map[v1alpha1.ObjectID]*unstructured.Unstructured{}
			if t != nil {
				for _, o := range t.Objects {
					m[v1alpha1.IDOf(o)] = o
				}
			}
			return m
		}
		bo, ao := objs(b), objs(a)
		keys := union(bo, ao)
		slices.SortFunc(keys, func(x, y v1alpha1.ObjectID) int {
			return strings.Compare(x.String()+"\x00"+x.Group, y.String()+"\x00"+y.Group)
		})
		for _, k := range keys {
			bObj, aObj := bo[k], ao[k]
			od := &objectDiff{Object: k.String(), Group: k.Group}
			switch {
			case bObj == nil:
				od.Change = statusAdded
				td.Added++
			case aObj == nil:
				od.Change = statusRemoved
				td.Removed++
			case reflect.DeepEqual(bObj.Object, aObj.Object):
				continue
			default:
				od.Change = statusChanged
				td.Changed++
			}
			var buf strings.Builder
			name := id + "/" + k.String()
			if err := objdiff.Write(&buf, "base/"+name, "worktree/"+name, bObj, aObj, red); err != nil {
				return nil, fmt.Errorf("target %q: %s: %w", id, k, err)
			}
			od.Diff = buf.String()
			if od.Diff == "" {
				// Masks hide what changed.
				od.Diff = fmt.Sprintf("--- base/%s\n+++ worktree/%s\n# only masked Secret values differ\n", name, name)
			}
			td.Objects = append(td.Objects, od)
		}
	}
	return out, nil
}
