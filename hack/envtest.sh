#!/usr/bin/env bash
# Provides the envtest assets (etcd and kube-apiserver) under bin/envtest and
# prints that directory, for KUBEBUILDER_ASSETS. Nothing is downloaded but
# Debian's etcd-server package and Go modules from the module proxy:
#   - etcd: /usr/bin/etcd from etcd-server (installed with apt-get when absent);
#   - kube-apiserver: built from the k8s.io/kubernetes module in
#     hack/tools/kube-apiserver (about 7 minutes cold on 2 cores; the Go build
#     cache makes later builds take seconds).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
assets="$root/bin/envtest"
mkdir -p "$assets"

log() { echo "envtest: $*" >&2; }

if [ ! -x "$assets/etcd" ]; then
  etcd=$(command -v etcd || true)
  if [ -z "$etcd" ]; then
    log "installing etcd-server from Debian"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq etcd-server >&2
    etcd=$(command -v etcd || echo /usr/bin/etcd)
  fi
  # Debian starts etcd as a service on install; the tests start their own.
  if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
    systemctl stop etcd >&2 || true
  fi
  ln -sf "$etcd" "$assets/etcd"
fi

if [ ! -x "$assets/kube-apiserver" ] || [ "$root/hack/tools/kube-apiserver/go.mod" -nt "$assets/kube-apiserver" ]; then
  log "building kube-apiserver (cold: about 7 minutes on 2 cores)"
  # The server derives its emulated version and feature gates from its own
  # version, so stamp the module's.
  version=$(cd "$root/hack/tools/kube-apiserver" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  minor=$(echo "$version" | cut -d. -f2)
  pkg=k8s.io/component-base/version
  ldflags="-X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  (cd "$root/hack/tools/kube-apiserver" && go build -trimpath -ldflags "$ldflags" -o "$assets/kube-apiserver" .)
fi

echo "$assets"
