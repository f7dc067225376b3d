#!/usr/bin/env bash
# Rewrites lang/kustomize/testdata/*/*.expected.yaml with what the real
# kustomize CLI prints, at the version whose sigs.k8s.io/kustomize/api
# ManifestSync uses (pinned by hack/tools/kustomize/go.mod). The tests then
# hold our in-memory build to the CLI's output. For CASE/a_b.expected.yaml,
# it runs `kustomize build CASE/a/b`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kustomize=$root/bin/kustomize
go build -C "$root/hack/tools/kustomize" -o "$kustomize" sigs.k8s.io/kustomize/kustomize/v5
for want in "$root"/lang/kustomize/testdata/*/*.expected.yaml; do
  case_dir=$(dirname "$want")
  dir=$(basename "$want" .expected.yaml | tr _ /)
  "$kustomize" build "$case_dir/$dir" 2>/dev/null >"$want"
done
