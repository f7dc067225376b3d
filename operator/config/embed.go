// Package config holds the operator's Kubernetes manifests in a kustomize
// layout: crd/ (generated), rbac/ (the operator's own least-privilege role,
// and the role for what it applies), manager/ (its namespace, Deployment
// and metrics Service), default/, which builds them all, and ui/, a
// component that adds the web UI (its Service, the rights it needs, the
// operator's flag) to a build of default/. It embeds the
// generated CRD, so that Go code validates against exactly the schema that
// is deployed. A test applies default/ to a real API server with
// server-side dry-run; others hold the Helm chart (operator/chart) to the
// same objects.
//
// It imports nothing but embed; keep it that way, so that any package may
// read the CRDs without pulling in a cluster client.
package config

import _ "embed" // for the go:embed directives below

// ManifestSyncCRD is the CustomResourceDefinition of ManifestSync as
// controller-gen generates it (`make manifests`): YAML, one document.
//
//go:embed crd/bases/manifestsync.dev_manifestsyncs.yaml
var ManifestSyncCRD []byte
