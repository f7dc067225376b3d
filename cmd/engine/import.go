package main

import (
	"github.com/spf13/cobra"
)

// newImportCmd is engine import: Flux and Argo CD objects to ManifestSyncs.
func newImportCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "import [FILES|DIRS...]",
		Short:  "Write the ManifestSyncs equivalent to Flux and Argo CD objects",
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return usageErr("import: not ready yet")
		},
	}
}
