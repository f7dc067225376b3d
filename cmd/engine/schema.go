package main

import (
	"github.com/spf13/cobra"

	"github.com/manifestsync/manifestsync/operator/crd"
)

func newSchemaCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "schema",
		Short: "Print the JSON Schema of a ManifestSync file, for editors",
		Long: `Print the JSON Schema (draft 2020-12) of a ManifestSync resource file,
converted from the OpenAPI schema of the CRD built into this binary, so
that an editor completes and checks sync.yaml. With the YAML language
server (VS Code's YAML extension, and others), save it and name it on
the file's first line:

    engine schema > manifestsync.schema.json
    # yaml-language-server: $schema=./manifestsync.schema.json

docs/manifestsync.schema.json in the repository is the same schema.
What JSON Schema cannot say (the CRD's CEL rules, list-map keys) engine
vet checks.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := crd.ManifestSyncJSONSchema()
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}
}
