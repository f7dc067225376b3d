// Package v1alpha1 holds the ManifestSync API types (manifestsync.dev/v1alpha1).
//
// The package is a leaf: it imports only apimachinery, so that the offline
// core (engine, cmd/engine eval) can read a ManifestSync without pulling in a
// cluster client.
//
// +kubebuilder:object:generate=true
// +groupName=manifestsync.dev
package v1alpha1
