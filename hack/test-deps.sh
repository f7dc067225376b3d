#!/usr/bin/env bash
# Installs the Debian packages a make target runs for real, when they are
# absent: `hack/test-deps.sh [test|demo] [--list]`. Those of the tests (test,
# the default):
#   - etcd-server: the etcd of the operator tests' control plane (envtest.sh
#     links it into bin/envtest);
#   - git: the git source's tests run git and git daemon;
#   - openssh-server: the sshd the git source's ssh tests start on a high
#     loopback port with a throwaway host key;
#   - docker-registry: the distribution registry the image test (hack/image)
#     pushes to and pulls from on 127.0.0.1;
#   - ca-certificates: the CA bundle `make image` puts in the image;
#   - chromium: the headless browser the web UI's acceptance tests (ui/e2e)
#     drive through the DevTools protocol.
# Those of `make demo` (demo) are only etcd-server and git: the demo serves
# the examples' Git sources with git daemon. --list prints the set's
# packages, one a line, and installs nothing.
# All come from Debian's archive; nothing else is downloaded. Services the
# packages start on install are stopped: the tests and the demo start their
# own.
set -euo pipefail

usage() {
  echo "usage: $0 [test|demo] [--list]" >&2
  exit 2
}

for_what=test
list=false
for arg in "$@"; do
  case "$arg" in
  test | demo) for_what=$arg ;;
  --list) list=true ;;
  *) usage ;;
  esac
done

case "$for_what" in
test) packages=(etcd-server git openssh-server docker-registry ca-certificates chromium) ;;
demo) packages=(etcd-server git) ;;
esac
if $list; then
  printf '%s\n' "${packages[@]}"
  exit 0
fi

# present PACKAGE is true when what PACKAGE provides is here.
present() {
  case "$1" in
  etcd-server) command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] ;;
  git) command -v git >/dev/null 2>&1 ;;
  openssh-server) [ -x /usr/sbin/sshd ] ;;
  docker-registry) command -v docker-registry >/dev/null 2>&1 ;;
  ca-certificates) [ -s /etc/ssl/certs/ca-certificates.crt ] ;;
  chromium) command -v chromium >/dev/null 2>&1 ;;
  esac
}

missing=()
for p in "${packages[@]}"; do
  present "$p" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "test-deps: installing ${missing[*]} from Debian (for make $for_what)" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
if command -v systemctl >/dev/null 2>&1; then
  for svc in etcd ssh docker-registry; do
    systemctl is-active --quiet "$svc" 2>/dev/null && $sudo systemctl stop "$svc" >&2 || true
  done
fi
