package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/stdlib"
)

func newDocCmd() *cobra.Command {
	var output, stubs string
	cmd := &cobra.Command{
		Use:   "doc [MODULE]",
		Short: "List the Starlark modules, or document one module's functions",
		Long: `List the Starlark modules given to every script, or document one module's
functions.

-o markdown prints every module as one Markdown page (docs/stdlib.md).
--stubs DIR writes the modules as type-stub files, DIR/MODULE.py and
DIR/__init__.py for the single built-ins, which Starlark language servers
read built-ins from (docs/stubs; for tilt-dev's starlark-lsp:
--builtin-paths DIR).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			if stubs != "" {
				if len(args) > 0 {
					return usageErr("doc: --stubs writes every module: no MODULE")
				}
				return writeStubs(stubs)
			}
			switch output {
			case "text":
			case "markdown":
				if len(args) > 0 {
					return usageErr("doc: -o markdown prints every module: no MODULE")
				}
				_, err := w.Write(stdlib.Markdown())
				return err
			default:
				return usageErr("doc: -o %q: want text or markdown", output)
			}
			mods := stdlib.Modules()
			if len(args) == 0 {
				fmt.Fprintln(w, "Modules given to every script (engine doc MODULE for one):")
				for _, m := range mods {
					fmt.Fprintf(w, "  %-10s %s\n", m.Name, firstLine(m.Doc))
				}
				return nil
			}
			var names []string
			for _, m := range mods {
				if m.Name != args[0] {
					names = append(names, m.Name)
					continue
				}
				fmt.Fprintf(w, "%s\n\n%s\n", m.Name, indent(m.Doc, ""))
				for _, f := range m.Funcs {
					fmt.Fprintf(w, "\n%s\n%s\n", f.Signature, indent(f.Doc, "    "))
				}
				return nil
			}
			return usageErr("doc: no module %q (modules: %s)", args[0], strings.Join(names, ", "))
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or markdown (every module)")
	cmd.Flags().StringVar(&stubs, "stubs", "", "write the modules as type stubs for Starlark language servers into DIR")
	return cmd
}

// writeStubs writes the stub files into dir, and removes the .py files
// of modules that are gone.
func writeStubs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usageErr("doc: %w", err)
	}
	files := stdlib.Stubs()
	old, err := filepath.Glob(filepath.Join(dir, "*.py"))
	if err != nil {
		return usageErr("doc: %w", err)
	}
	for _, p := range old {
		if _, ok := files[filepath.Base(p)]; !ok {
			if err := os.Remove(p); err != nil {
				return usageErr("doc: %w", err)
			}
		}
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return usageErr("doc: %w", err)
		}
	}
	return nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexAny(s, "\n"); i >= 0 {
		s = s[:i]
	}
	return s
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = prefix + l
		}
	}
	return strings.Join(lines, "\n")
}
