#!/usr/bin/env bash
# Installs the Debian packages the tests run for real, when they are absent:
#   - etcd-server: the etcd of the operator tests' control plane (envtest.sh
#     links it into bin/envtest);
#   - openssh-server: the sshd the git source's ssh tests start on a high
#     loopback port with a throwaway host key;
#   - docker-registry: the distribution registry the image test (hack/image)
#     pushes to and pulls from on 127.0.0.1;
#   - ca-certificates: the CA bundle `make image` puts in the image.
# All come from Debian's archive; nothing else is downloaded. Services the
# packages start on install are stopped: the tests start their own.
set -euo pipefail

missing=()
command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || missing+=(etcd-server)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
[ -s /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
[ ${#missing[@]} -eq 0 ] && exit 0

echo "test-deps: installing ${missing[*]} from Debian" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
if command -v systemctl >/dev/null 2>&1; then
  for svc in etcd ssh docker-registry; do
    systemctl is-active --quiet "$svc" 2>/dev/null && $sudo systemctl stop "$svc" >&2 || true
  done
fi
