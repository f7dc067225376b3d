// Package source provides the snapshots of sources that live on a disk:
// a local directory, and an object read from a YAML file. It also holds the
// interface through which the operator reads objects from a cluster.
//
// Like the engine it must not import client-go or controller-runtime; the git
// provider, the only one that touches a network, lives in source/git.
package source
