// Package source resolves the sources of a spec into snapshots, the one
// way the CLI and the operator read them (Resolver), through small
// providers: git (a GitFetcher; git.Provider with a credentials function),
// objects and object sets (an ObjectReader the operator implements over
// its caches, asked per source), and, for the CLI, Local: --source
// overrides and the copies beside a sync file. Kustomize sources are built
// by the engine from the snapshots they name. It also reads what lives on
// a disk (directories, objects in YAML files, never leaving the tree they
// are read in) and parses and shows git refs.
//
// Like the engine it must not import client-go or controller-runtime; the git
// provider, the only one that touches a network, lives in source/git.
package source
