#!/usr/bin/env bash
# Regenerates schemas/k8s, the builtin CUE schemas of the core Kubernetes
# kinds, from the k8s.io/api Go types: `cue get go` translates the packages
# k8sgen lists (and the apimachinery packages they use), then k8sgen fixes what
# cue get go gets wrong for Kubernetes JSON, flattens it all into one CUE
# package (see hack/tools/cue/k8sgen for why) and writes its index file
# schemas/k8s/k8s.cue (#<Kind> for every kind, and #Object). The versions
# of cue and k8s.io/api are pinned by hack/tools/cue/go.mod. Run by
# `make generate`.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools=$root/hack/tools/cue
out=$root/schemas/k8s
cue=$root/bin/cue
go build -C "$tools" -o "$cue" cuelang.org/go/cmd/cue
# The k8s.io/api packages whose kinds the schemas define.
packages=$(go run -C "$tools" ./k8sgen -packages)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# cue get go resolves the Go packages in the Go module of its working
# directory, and writes into cue.mod/gen of the CUE module there.
mkdir -p "$tmp/get/cue.mod"
cp "$tools/go.mod" "$tools/go.sum" "$tmp/get/"
echo 'module: "manifestsync.dev/get@v0", language: version: "v0.17.0"' >"$tmp/get/cue.mod/module.cue"
# shellcheck disable=SC2086 # one import path per word
(cd "$tmp/get" && "$cue" get go $packages)

go run -C "$tools" ./k8sgen "$tmp/get/cue.mod/gen" "$tmp/k8s"

rm -rf "$out"
cp -R "$tmp/k8s" "$out"
