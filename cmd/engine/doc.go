package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/stdlib"
)

func newDocCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "doc [MODULE]",
		Short: "List the Starlark modules, or document one module's functions",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
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
