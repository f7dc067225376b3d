package main

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/engine/source"
	"github.com/manifestsync/manifestsync/internal/plural"
	lcue "github.com/manifestsync/manifestsync/lang/cue"
	lstar "github.com/manifestsync/manifestsync/lang/starlark"
)

// formatters are what engine fmt formats, by file extension.
var formatters = map[string]func(name string, src []byte) ([]byte, error){
	".star": lstar.Format,
	".cue":  lcue.Format,
}

type fmtFlags struct {
	write bool
	check bool
}

func newFmtCmd() *cobra.Command {
	var f fmtFlags
	cmd := &cobra.Command{
		Use:   "fmt [-w | --check] [PATHS...]",
		Short: "Format .star and .cue files",
		Long: `Format the .star and .cue files under PATHS (default "."): Starlark as
buildifier formats a generic Starlark file (bazelbuild/buildtools), with
the while loops and bytes literals of the transforms' dialect kept; CUE as
cue fmt does. Directories are walked, except those whose name starts
with "."; a file given by name must be a .star or .cue file.

Without a flag, the formatted files are printed. -w rewrites the files
that are not formatted, in place. --check prints the name of each such
file and changes nothing (for CI).

A file that does not parse is reported with its file:line:col, and so is
a file the formatter would change the meaning of (never written); the
other files are still formatted.

Exit status: 0 done (for --check: every file is formatted), 1 --check
found files to format, 2 usage error or a file that could not be formatted.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFmt(cmd.OutOrStdout(), cmd.ErrOrStderr(), &f, args)
		},
	}
	cmd.Flags().BoolVarP(&f.write, "write", "w", false, "rewrite the files that are not formatted")
	cmd.Flags().BoolVar(&f.check, "check", false, "list the files that are not formatted and exit 1 if there are any")
	return cmd
}

func runFmt(stdout, stderr io.Writer, f *fmtFlags, paths []string) error {
	if f.write && f.check {
		return usageErr("fmt: -w and --check exclude each other")
	}
	if len(paths) == 0 {
		paths = []string{"."}
	}
	files, err := findFormattable(paths)
	if err != nil {
		return usageErr("fmt: %w", err)
	}
	var unformatted, broken int
	for _, name := range files {
		src, err := source.ReadRegularFile(name)
		if err != nil {
			return usageErr("fmt: %w", err)
		}
		out, err := formatters[filepath.Ext(name)](name, src)
		if err != nil {
			fmt.Fprintf(stderr, "%s: fmt: %v\n", programName, err)
			broken++
			continue
		}
		changed := !bytes.Equal(src, out)
		switch {
		case f.check:
			if changed {
				fmt.Fprintln(stdout, name)
				unformatted++
			}
		case f.write:
			if changed {
				if err := writeKeepingMode(name, out); err != nil {
					return usageErr("fmt: %w", err)
				}
			}
		default:
			if _, err := stdout.Write(out); err != nil {
				return err
			}
		}
	}
	switch {
	case broken > 0:
		return usageErr("fmt: %s could not be formatted", plural.Count(broken, "file"))
	case unformatted > 0:
		return failed(fmt.Errorf("fmt: %s to format (engine fmt -w formats them)", plural.Count(unformatted, "file")))
	}
	return nil
}

// findFormattable lists the .star and .cue files under paths, in lexical
// order per path; a file named on the command line must have one of the
// extensions.
func findFormattable(paths []string) ([]string, error) {
	var out []string
	for _, root := range paths {
		info, err := os.Stat(root)
		if err != nil {
			return nil, err
		}
		if !info.IsDir() {
			if formatters[filepath.Ext(root)] == nil {
				return nil, fmt.Errorf("%s: not a .star or .cue file", root)
			}
			out = append(out, root)
			continue
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if formatters[filepath.Ext(p)] == nil || d.IsDir() || d.Type()&fs.ModeSymlink != 0 {
				return nil
			}
			if !d.Type().IsRegular() {
				// A FIFO, socket or device: refused, not opened.
				return &source.NotRegularError{Path: p, Mode: d.Type()}
			}
			out = append(out, p)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// writeKeepingMode replaces a file's content, keeping its permissions.
func writeKeepingMode(name string, b []byte) error {
	info, err := os.Stat(name)
	if err != nil {
		return err
	}
	return os.WriteFile(name, b, info.Mode().Perm())
}
