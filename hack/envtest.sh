#!/usr/bin/env bash
# Provides the local control plane's programs under bin/envtest and prints
# that directory, for KUBEBUILDER_ASSETS. Nothing is downloaded but Debian's
# etcd-server package and Go modules from the module proxy:
#   - etcd: /usr/bin/etcd from etcd-server (installed with apt-get when absent);
#   - kube-apiserver, kube-controller-manager, kube-scheduler: built from the
#     k8s.io/kubernetes module in hack/tools/kube-apiserver (cold on 2 idle
#     cores: kube-apiserver about 7 minutes, then the other two, which share
#     most of its packages, about 3 more; with a warm Go build cache, a
#     rebuild of all three takes under 2 minutes);
#   - kwok and kwok.yaml (its default stages): built from sigs.k8s.io/kwok in
#     hack/tools/kwok (cold: about 3 minutes).
# Each program is rebuilt only when the sources it is built from change:
# beside it, NAME.stamp holds the sha256 of its tools module's go.mod, go.sum
# and main package, and a build whose stamp differs (or is absent) runs again.
# Every program built is also kept in ENVTEST_CACHE (default:
# manifestsync-envtest beside Go's build cache, so that emptying GOCACHE's
# directory, as make ci-cold does, empties it too; empty: none), by name and
# stamp, the last of each name only: a new clone or worktree takes them from
# there instead of linking them again (a minute and more of make test).
# A build says which program it builds, how long it has been building every
# ENVTEST_PROGRESS_EVERY seconds (30) and what it took, on stderr: a cold
# one is long and would otherwise be silent. `make test`, `make demo` and
# `make bench` all use this directory: one build serves them all.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
assets="$root/bin/envtest"
every=${ENVTEST_PROGRESS_EVERY:-30}
mkdir -p "$assets"

log() { echo "envtest: $*" >&2; }

# duration SECONDS prints them as 7m05s, or 42s under a minute.
duration() {
  if [ "$1" -ge 60 ]; then
    printf '%dm%02ds' $(($1 / 60)) $(($1 % 60))
  else
    printf '%ds' "$1"
  fi
}

# ticker NAME START says every $every seconds how long NAME has been
# building since START (a value of $SECONDS), until it is sent SIGTERM; its
# sleep goes with it, so that nothing holds stderr open after the build.
ticker() {
  local sleeper=""
  trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
  while :; do
    sleep "$every" &
    sleeper=$!
    wait "$sleeper" || true
    log "building $1 ... $(duration $((SECONDS - $2)))"
  done
}

ticking="" # the running ticker's pid
stop_ticker() {
  [ -n "$ticking" ] || return 0
  kill "$ticking" 2>/dev/null || true
  wait "$ticking" 2>/dev/null || true
  ticking=""
}
trap stop_ticker EXIT

# timed NAME ABOUT CMD... builds NAME with CMD in the foreground (Ctrl-C
# stops it as usual) while a ticker reports its progress, then says what
# it took.
timed() {
  local name=$1 start=$SECONDS rc=0
  log "building $name ($2)"
  shift 2
  ticker "$name" "$start" >&2 </dev/null &
  ticking=$!
  "$@" || rc=$?
  stop_ticker
  if [ "$rc" -eq 0 ]; then
    log "built $name in $(duration $((SECONDS - start)))"
  else
    log "building $name failed after $(duration $((SECONDS - start)))"
  fi
  return "$rc"
}

# indir DIR CMD... runs CMD in DIR.
indir() {
  local dir=$1
  shift
  (cd "$dir" && "$@")
}

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

# cache is where built programs are kept ("" when none).
if [ -n "${ENVTEST_CACHE+set}" ]; then
  cache=$ENVTEST_CACHE
else
  cache=""
  gocache=$(go env GOCACHE 2>/dev/null || true)
  case "$gocache" in
  /*) cache="$(dirname "$gocache")/manifestsync-envtest" ;;
  esac
fi

# keep NAME STAMP [FILE...] copies bin/envtest/NAME (and FILEs beside it)
# into the cache as NAME-STAMP, removing the earlier ones of NAME. A cache
# that cannot be written costs the next clone a build, nothing more.
keep() {
  [ -n "$cache" ] || return 0
  local name=$1 sum=$2 f
  shift 2
  mkdir -p "$cache" 2>/dev/null || return 0
  rm -rf "$cache/$name-"*
  mkdir "$cache/$name-$sum.tmp" 2>/dev/null || return 0
  for f in "$name" "$@"; do
    cp "$assets/$f" "$cache/$name-$sum.tmp/$f" 2>/dev/null || { rm -rf "$cache/$name-$sum.tmp"; return 0; }
  done
  mv "$cache/$name-$sum.tmp" "$cache/$name-$sum" 2>/dev/null || rm -rf "$cache/$name-$sum.tmp"
}

# kept NAME STAMP [FILE...] is true when the cache has NAME (and FILEs)
# built from the sources of STAMP, or when there is no cache.
kept() {
  [ -n "$cache" ] || return 0
  local name=$1 sum=$2 f
  shift 2
  for f in "$name" "$@"; do
    [ -f "$cache/$name-$sum/$f" ] || return 1
  done
}

# cached NAME STAMP [FILE...] copies NAME (and FILEs) built from the sources
# of STAMP out of the cache into bin/envtest, and is false when the cache
# does not have them.
cached() {
  [ -n "$cache" ] && kept "$@" || return 1
  local name=$1 sum=$2 f
  shift 2
  for f in "$name" "$@"; do
    cp "$cache/$name-$sum/$f" "$assets/$f.tmp" && mv "$assets/$f.tmp" "$assets/$f" || return 1
  done
  echo "$sum" >"$assets/$name.stamp"
  log "took $name from $cache (built from the same sources before)"
}

# stamp MODULE DIR prints the sha256 of what is built from the Go package
# DIR of the tools module MODULE: the module's go.mod and go.sum and DIR's
# .go files. It names the files, so that moving one changes it too.
stamp() {
  local mod="$root/hack/tools/$1"
  (cd "$mod" && sha256sum go.mod go.sum "$2"/*.go | sha256sum | cut -d' ' -f1)
}

# fresh NAME STAMP is true when bin/envtest/NAME exists and was built from
# the sources whose stamp is STAMP.
fresh() {
  [ -x "$assets/$1" ] && [ "$(cat "$assets/$1.stamp" 2>/dev/null)" = "$2" ]
}

# The Kubernetes programs derive their emulated version and feature gates
# from their own version, so stamp the module's.
k8s_ldflags() {
  local version minor pkg=k8s.io/component-base/version
  version=$(cd "$root/hack/tools/kube-apiserver" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
  minor=$(echo "$version" | cut -d. -f2)
  echo "-X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
}

# build NAME MODULE DIR ABOUT builds the main package DIR of the tools
# module MODULE into bin/envtest/NAME, unless it is fresh.
build() {
  local name=$1 mod=$2 dir=$3 about=$4 sum ldflags=""
  sum=$(stamp "$mod" "$dir")
  if fresh "$name" "$sum"; then
    kept "$name" "$sum" || keep "$name" "$sum"
    return 0
  fi
  rm -f "$assets/$name.stamp"
  cached "$name" "$sum" && return 0
  [ "$mod" = kube-apiserver ] && ldflags=$(k8s_ldflags)
  timed "$name" "$about" indir "$root/hack/tools/$mod" go build -trimpath -ldflags "$ldflags" -o "$assets/$name" "./$dir"
  echo "$sum" >"$assets/$name.stamp"
  keep "$name" "$sum"
}

build kube-apiserver kube-apiserver . "cold: about 7 minutes on 2 cores"
build kube-controller-manager kube-apiserver kube-controller-manager "cold: about 2 minutes more on 2 cores"
build kube-scheduler kube-apiserver kube-scheduler "cold: about 1 minute more on 2 cores"

# build_kwok builds kwok and writes its default stages.
build_kwok() {
  indir "$root/hack/tools/kwok" go build -trimpath -o "$assets/kwok" sigs.k8s.io/kwok/cmd/kwok &&
    indir "$root/hack/tools/kwok" go run ./stages >"$assets/kwok.yaml.tmp"
}

kwok_sum=$(stamp kwok stages)
if fresh kwok "$kwok_sum" && [ -s "$assets/kwok.yaml" ]; then
  kept kwok "$kwok_sum" kwok.yaml || keep kwok "$kwok_sum" kwok.yaml
else
  rm -f "$assets/kwok.stamp"
  if ! cached kwok "$kwok_sum" kwok.yaml; then
    timed kwok "cold: about 3 minutes on 2 cores" build_kwok
    mv "$assets/kwok.yaml.tmp" "$assets/kwok.yaml"
    echo "$kwok_sum" >"$assets/kwok.stamp"
    keep kwok "$kwok_sum" kwok.yaml
  fi
fi

echo "$assets"
