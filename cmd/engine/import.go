package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/api/v1alpha1"
	"github.com/manifestsync/manifestsync/engine/importer"
	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/plural"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

type importFlags struct {
	clusterFlags
	fromCluster   bool
	allNamespaces bool
	outDir        string
	report        string
	toNamespace   string
	repos         []string
	adopt         bool
	readTimeout   time.Duration
}

func newImportCmd() *cobra.Command {
	var f importFlags
	cmd := &cobra.Command{
		Use:   "import [FILES|DIRS...] [--from-cluster [-n NS | -A]] [-o DIR]",
		Short: "Write the ManifestSyncs equivalent to Flux and Argo CD objects",
		Long: `Read Flux and Argo CD objects and write the equivalent ManifestSyncs:

  Flux: GitRepository, OCIRepository, HelmRepository, HelmChart
        (source.toolkit.fluxcd.io), Kustomization
        (kustomize.toolkit.fluxcd.io), HelmRelease (helm.toolkit.fluxcd.io)
  Argo CD: Application, ApplicationSet (list, clusters and git
        generators) (argoproj.io)

One ManifestSync is written per Kustomization, HelmRelease and
Application, with its name and namespace (--to-namespace puts them all
in one); the sources a Kustomization or HelmRelease names become its git
or helm sources, named after them; dependsOn is kept; the target is the
targetNamespace or the destination (a remote Argo CD cluster becomes a
target whose kubeconfig Secret you create: the report names it). An
ApplicationSet becomes one ManifestSync with a target per generated
Application when they differ only in their destination, else one per
generated Application.

The objects come from the files given (YAML, several documents each) and
the YAML files under the directories given, or with --from-cluster from
the cluster of --kubeconfig (its context's namespace, -n NS, or every
namespace with -A): only the Flux and Argo CD kinds are listed, and of
Argo CD's cluster Secrets only the names and labels (never their data).

Every field that is not carried over, or is with another meaning, is
reported with the object, its file:line and why: on stderr (lines
starting "warning:"), or in --report FILE, and as a comment at the top
of each ManifestSync written. Objects of other kinds are listed and
skipped.

--repo URL=DIR gives a local checkout of a git repository: the git
generators of ApplicationSets read it, and the Kustomizations and
Applications of that repository are checked against it (a path holding a
kustomization.yaml is built over the whole repository, a chart directory
becomes a helm source).

The ManifestSyncs are printed as one YAML stream, or written to
DIR/NAMESPACE/NAME.yaml with -o DIR. Check them with engine vet and
render them with engine eval before applying them.

Exit status: 0 written (findings or not), 2 error: a file that is not
YAML (FILE:LINE), a Kustomization or HelmRelease whose source is not
among the objects (naming both), an unreachable cluster.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runImport(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), &f, args)
		},
	}
	fl := cmd.Flags()
	f.add(fl)
	fl.Lookup("namespace").Usage = "with --from-cluster: the namespace to read; default: the context's"
	fl.BoolVar(&f.fromCluster, "from-cluster", false, "read the Flux and Argo CD objects from the cluster")
	fl.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "with --from-cluster: read every namespace")
	fl.StringVarP(&f.outDir, "out-dir", "o", "", "write DIR/NAMESPACE/NAME.yaml instead of printing")
	fl.StringVar(&f.report, "report", "", "write the findings to FILE instead of stderr")
	fl.StringVar(&f.toNamespace, "to-namespace", "", "put every ManifestSync in this namespace; default: each object's own")
	fl.StringArrayVar(&f.repos, "repo", nil, "URL=DIR: a local checkout of the git repository URL (repeatable)")
	fl.BoolVar(&f.adopt, "adopt", false, "write policy.resources: Adopt, to take over the objects Flux or Argo CD applied")
	fl.DurationVar(&f.readTimeout, "timeout", lstar.DefaultTimeout, "limit of reading the files and the cluster")
	return cmd
}

func runImport(ctx context.Context, stdout, stderr io.Writer, f *importFlags, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(args) == 0 && !f.fromCluster {
		return usageErr("import: give files or directories, or --from-cluster")
	}
	if f.allNamespaces && f.namespace != "" {
		return usageErr("import: -n and -A are exclusive")
	}
	if (f.allNamespaces || f.namespace != "") && !f.fromCluster {
		return usageErr("import: -n and -A are for --from-cluster")
	}
	opts := importer.Options{Namespace: f.toNamespace, Repos: map[string]fs.FS{}}
	for _, r := range f.repos {
		u, dir, ok := strings.Cut(r, "=")
		if !ok || u == "" || dir == "" {
			return usageErr("import: --repo %q: want URL=DIR", r)
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			return usageErr("import: --repo %s: %w", r, err)
		}
		defer root.Close()
		opts.Repos[u] = root.FS()
	}
	rctx, timeout, cancel := readDeadline(ctx, f.readTimeout)
	defer cancel()
	objs, err := readImportFiles(rctx, timeout, args)
	if err != nil {
		return err
	}
	if f.fromCluster {
		listed, err := readWithin(rctx, timeout, "import: the cluster", func(ctx context.Context) ([]importer.Object, error) {
			return listFluxArgo(ctx, &f.clusterFlags, f.allNamespaces)
		})
		if err != nil {
			return err
		}
		objs = append(objs, listed...)
	}
	res, err := importer.Import(objs, opts)
	if err != nil {
		return usageErr("import: %w", err)
	}
	if f.adopt {
		for _, im := range res.Syncs {
			im.Sync.Spec.Policy.Resources = v1alpha1.PolicyAdopt
		}
	}
	if err := writeImported(stdout, f.outDir, res); err != nil {
		return err
	}
	return writeFindings(stderr, f.report, res)
}

// Bounds of what engine import reads: one file, and all of them.
const (
	maxImportFile  = 16 << 20
	maxImportBytes = 256 << 20
)

// importFile matches a YAML file that holds a Flux or Argo CD object, to
// tell one that is malformed from some other YAML file in a directory.
var importFile = regexp.MustCompile(`(?m)^\s*apiVersion:\s*["']?[a-z.]*(fluxcd\.io|argoproj\.io)/`)

// readImportFiles decodes the files given and the YAML files under the
// directories given. A file that is not YAML is an error when it was
// named or looks like a Flux or Argo CD object; any other is skipped.
func readImportFiles(ctx context.Context, timeout time.Duration, paths []string) ([]importer.Object, error) {
	cands, errs := findCandidates(paths)
	if len(errs) > 0 {
		return nil, usageErr("import: %w", errors.Join(errs...))
	}
	var objs []importer.Object
	total := int64(0)
	for _, c := range cands {
		if info, err := os.Stat(c.path); err == nil {
			if info.Size() > maxImportFile {
				return nil, usageErr("import: %s: %d bytes, more than the %d a file may have", c.path, info.Size(), maxImportFile)
			}
			if total += info.Size(); total > maxImportBytes {
				return nil, usageErr("import: the files given hold more than %d bytes: import fewer at a time", maxImportBytes)
			}
		}
		data, err := readUserFile(ctx, timeout, c.path)
		if err != nil {
			return nil, usageErr("import: %w", err)
		}
		if int64(len(data)) > maxImportFile {
			return nil, usageErr("import: %s: more than the %d bytes a file may have", c.path, maxImportFile)
		}
		o, err := importer.Decode(c.path, data)
		if err != nil {
			if !c.named && !importFile.Match(data) {
				continue
			}
			return nil, usageErr("import: %w", err)
		}
		objs = append(objs, o...)
	}
	return objs, nil
}

// writeImported prints the ManifestSyncs as one YAML stream, or writes
// each to dir/NAMESPACE/NAME.yaml (inside dir only).
func writeImported(stdout io.Writer, dir string, res *importer.Result) error {
	if dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return usageErr("import: %w", err)
		}
	}
	var stream bytes.Buffer
	for i, im := range res.Syncs {
		y, err := im.YAML()
		if err != nil {
			return err
		}
		if dir == "" {
			if i > 0 {
				stream.WriteString("---\n")
			}
			stream.Write(y)
			continue
		}
		name := filepath.Join(im.Sync.Namespace, im.Sync.Name+".yaml")
		if err := source.WriteFileIn(dir, name, y, 0o644); err != nil {
			return usageErr("import: %w", err)
		}
	}
	_, err := stdout.Write(stream.Bytes())
	return err
}

// writeFindings writes every finding, of the ManifestSyncs and of the
// objects that gave none, to stderr as warnings, or to the file report.
func writeFindings(stderr io.Writer, report string, res *importer.Result) error {
	var all []importer.Finding
	for _, im := range res.Syncs {
		all = append(all, im.Findings...)
	}
	all = append(all, res.Findings...)
	if report != "" {
		var b bytes.Buffer
		for _, fd := range all {
			b.WriteString(fd.String() + "\n")
		}
		if err := source.WriteFileIn(filepath.Dir(report), filepath.Base(report), b.Bytes(), 0o644); err != nil {
			return usageErr("import: --report: %w", err)
		}
	} else {
		for _, fd := range all {
			warning(stderr, "%s", fd)
		}
	}
	note(stderr, "%s written, %s", plural.Count(len(res.Syncs), "ManifestSync"), plural.Count(len(all), "finding"))
	return nil
}

// sortedObjects orders listed objects by kind, namespace and name, so
// that what is written does not depend on the API server's order.
func sortedObjects(objs []importer.Object) {
	key := func(o importer.Object) string {
		meta, _ := o.Content["metadata"].(map[string]any)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		kind, _ := o.Content["kind"].(string)
		return kind + "\x00" + ns + "\x00" + name
	}
	slices.SortFunc(objs, func(a, b importer.Object) int { return strings.Compare(key(a), key(b)) })
}
