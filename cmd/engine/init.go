package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/internal/plural"
	"github.com/manifestsync/manifestsync/operator/crd"
)

// scaffold holds what engine init writes: common/ for every flavour, and
// star/ or cue/ for the transform. Every file is a text/template of
// scaffoldData; a .tmpl suffix is dropped.
//
//go:embed scaffold
var scaffold embed.FS

// scaffoldData is what the scaffold's templates see.
type scaffoldData struct {
	// Name names the ManifestSync, its ConfigMap and its namespace: the
	// directory's name as a DNS label.
	Name string
	// CUE is set for a CUE transform, unset for Starlark.
	CUE bool
}

// jsonSchemaFile is the JSON Schema engine init writes beside sync.yaml,
// which the sync.yaml's yaml-language-server comment names.
const jsonSchemaFile = "manifestsync.schema.json"

func newInitCmd() *cobra.Command {
	var useCUE bool
	cmd := &cobra.Command{
		Use:   "init [--cue] DIR",
		Short: "Create a ManifestSync with a transform, a test and a schema in DIR",
		Long: `Create, in DIR (made if missing), a ManifestSync to start from:

  sync.yaml                  the ManifestSync: one git source "app", one target
  manifestsync.schema.json   its JSON Schema (engine schema), named on
                             sync.yaml's first line for the YAML language server
  app/transform.star         a Starlark transform rendering one ConfigMap,
  app/transform_test.star    and its test
  app/schemas/app.cue        a CUE schema every rendered object must pass

With --cue the transform is a CUE package instead (app/gen/objects.cue,
app/cue.mod/module.cue) and the test app/gen_test.star.

As written, engine eval -f DIR/sync.yaml, engine test DIR and engine
vet DIR accept them. No file is overwritten: if one exists, nothing is
written and the existing files are named.

Exit status: 0 written, 2 usage error or existing files.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			files, err := renderScaffold(args[0], useCUE)
			if err != nil {
				return err
			}
			if err := writeNew(args[0], files); err != nil {
				return err
			}
			names := make([]string, 0, len(files))
			for name := range files {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", filepath.Join(args[0], filepath.FromSlash(name)))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&useCUE, "cue", false, "a CUE transform instead of a Starlark one")
	return cmd
}

// renderScaffold returns the files engine init writes into dir, by
// slash-separated path.
func renderScaffold(dir string, useCUE bool) (map[string][]byte, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, usageErr("init: %w", err)
	}
	data := scaffoldData{Name: dnsLabel(filepath.Base(abs)), CUE: useCUE}
	flavour := "star"
	if useCUE {
		flavour = "cue"
	}
	files := map[string][]byte{}
	for _, root := range []string{"scaffold/common", "scaffold/" + flavour} {
		err := fs.WalkDir(scaffold, root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			text, err := scaffold.ReadFile(p)
			if err != nil {
				return err
			}
			t, err := template.New(path.Base(p)).Option("missingkey=error").Parse(string(text))
			if err != nil {
				return err
			}
			var b bytes.Buffer
			if err := t.Execute(&b, data); err != nil {
				return err
			}
			files[strings.TrimSuffix(strings.TrimPrefix(p, root+"/"), ".tmpl")] = b.Bytes()
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("init: the scaffold: %w", err)
		}
	}
	schema, err := crd.ManifestSyncJSONSchema()
	if err != nil {
		return nil, fmt.Errorf("init: %w", err)
	}
	files[jsonSchemaFile] = schema
	return files, nil
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// dnsLabel makes a directory's name a DNS label (RFC 1123), "app" when
// nothing of it is left.
func dnsLabel(s string) string {
	s = strings.Trim(notDNS.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(s) > 50 { // room for "-dev" and more
		s = strings.TrimRight(s[:50], "-")
	}
	if s == "" || s[0] < 'a' {
		s = "app-" + s
		s = strings.TrimRight(s, "-")
	}
	return s
}

// writeNew writes files under dir, none of which may exist: if some do,
// it writes nothing and names them.
func writeNew(dir string, files map[string][]byte) error {
	var exist []string
	for name := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if _, err := os.Lstat(p); err == nil {
			exist = append(exist, p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return usageErr("init: %w", err)
		}
	}
	if len(exist) > 0 {
		sort.Strings(exist)
		return usageErr("init: not overwriting %s (nothing written): %s", plural.Count(len(exist), "file"), strings.Join(exist, ", "))
	}
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return usageErr("init: %w", err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return usageErr("init: %w", err)
		}
	}
	return nil
}
