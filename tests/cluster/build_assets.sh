#!/usr/bin/env bash
# Builds what the `cluster` tests run, from the Go module proxy. `build_assets.sh` (or
# `build_assets.sh controlplane`): the real control plane, kube-apiserver, kube-controller-manager
# and kube-scheduler from k8s.io/kubernetes, and etcd from go.etcd.io/etcd/server.
# `build_assets.sh kueue`: Kueue's manager from sigs.k8s.io/kueue, with the Helm chart of the same
# module version beside it (charts/kueue), which the tests install it from.
# `build_assets.sh karpenter`: Karpenter with its KWOK cloud provider (sigs.k8s.io/karpenter/kwok,
# which makes Node objects itself instead of asking a cloud), with the CRDs of the same module
# version beside it (crds/: the KWOK chart's karpenter.sh CRDs and the KWOKNodeClass CRD).
# Versions are pinned in versions.env beside this script; each component is cached on its own.
#
# Karpenter's go.mod asks for a newer Go than the one installed here may be: its build alone sets
# GOTOOLCHAIN (KARPENTER_GOTOOLCHAIN in versions.env), and the go command fetches that toolchain
# from the module proxy as it fetches modules (cached in the module cache afterwards).
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every k8s.io/<staging> module
# with a local path. So we make a throwaway module that requires it and replaces each staging
# module with its published v0.<minor>.<patch> tag instead. etcd's own main module has the same
# problem; its server module exports etcdmain, so a three-line main of ours runs it.
#
# Runs at once on one machine (two test sessions, CI beside a developer) share one build: the
# build holds an flock on <cache>/<versions>.lock, and a second run waits for it, looks in the
# cache again and reuses what the first one built. The binaries are built into a staging
# directory beside the cache entry and renamed into place only when all four are there, so the
# cache never holds a partial binary; a failed or interrupted build removes its staging
# directory (one left by kill -9 is removed by the next build). Progress goes to stderr: a line
# per step with the seconds since the start, and every $ADL_K8S_PROGRESS_S (30) s during one.
#
# Prints the directory holding the component's binaries on its last line of stdout.
#   ADL_K8S_ASSETS=DIR   use prebuilt control-plane binaries from DIR (like setup-envtest's
#                        KUBEBUILDER_ASSETS); ADL_KUEUE_ASSETS=DIR the same for Kueue,
#                        ADL_KARPENTER_ASSETS=DIR for Karpenter
#   ADL_K8S_CACHE=DIR    where built binaries are kept (default ~/.cache/adl/k8s)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
component="${1:-controlplane}"
case "$component" in
  controlplane)
    bins=(kube-apiserver kube-controller-manager kube-scheduler etcd) files=()
    name="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}" prebuilt="${ADL_K8S_ASSETS:-}"
    prebuilt_var=ADL_K8S_ASSETS ;;
  kueue)
    bins=(kueue) files=(charts/kueue/Chart.yaml)
    name="kueue-${KUEUE_VERSION}" prebuilt="${ADL_KUEUE_ASSETS:-}" prebuilt_var=ADL_KUEUE_ASSETS ;;
  karpenter)
    bins=(karpenter)
    files=(crds/karpenter.sh_nodepools.yaml crds/karpenter.sh_nodeclaims.yaml
      crds/karpenter.kwok.sh_kwoknodeclasses.yaml)
    name="karpenter-${KARPENTER_VERSION}" prebuilt="${ADL_KARPENTER_ASSETS:-}"
    prebuilt_var=ADL_KARPENTER_ASSETS ;;
  *) echo "usage: $0 [controlplane|kueue|karpenter]" >&2; exit 2 ;;
esac

have_all() {
  for b in "${bins[@]}"; do [[ -x "$1/$b" ]] || return 1; done
  for f in "${files[@]}"; do [[ -f "$1/$f" ]] || return 1; done
}

if [[ -n "$prebuilt" ]]; then
  if have_all "$prebuilt"; then echo "$prebuilt"; exit 0; fi
  echo "$prebuilt_var=$prebuilt lacks one of: ${bins[*]} ${files[*]}" >&2; exit 2
fi

cache="${ADL_K8S_CACHE:-$HOME/.cache/adl/k8s}"
out="$cache/$name"
if have_all "$out"; then echo "$out"; exit 0; fi

for tool in go flock setsid; do
  command -v "$tool" >/dev/null || {
    echo "$tool is needed to build $component (or set $prebuilt_var)" >&2; exit 2; }
done
start=$SECONDS
tick="${ADL_K8S_PROGRESS_S:-30}"
log() { printf '[build_assets %4d s] %s\n' "$((SECONDS - start))" "$*" >&2; }

# --- one build at a time per cache entry ----------------------------------------------------
mkdir -p "$cache"
lock="$cache/$name.lock"   # kept: removing a lock file lets two runs lock different files
exec 9>>"$lock"
if ! flock -n 9; then
  log "another run is building $name (it holds $lock); waiting for it"
  flock 9
  if have_all "$out"; then log "the other run built it; reusing $out"; echo "$out"; exit 0; fi
  log "the other run did not finish its build; building here"
fi
if have_all "$out"; then echo "$out"; exit 0; fi  # finished between the first look and the lock

# Nobody else builds now, so what is here is a leftover: a partial directory written by an
# older version of this script, or the staging directory of a run killed with kill -9.
rm -rf "$out" "$cache/.$name.build."*
stage="$(mktemp -d "$cache/.$name.build.XXXXXX")"
work="$(mktemp -d)"
cleanup() {
  local pid
  for pid in $(jobs -p); do  # a step's process group (go and its compilers), its ticker
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  wait || true
  rm -rf "$stage" "$work"
}
trap cleanup EXIT
trap 'log "interrupted; nothing partial is left in $cache"; exit 130' INT
trap 'log "terminated; nothing partial is left in $cache"; exit 143' TERM
trap 'exit 129' HUP

# step WHAT CMD...: runs CMD in its own process group and in the background,
# so that a signal stops it at once instead of after it ends, and logs its progress. CMD does not
# inherit the lock's descriptor: the lock lasts exactly as long as this script.
step() {
  local what=$1 t0=$SECONDS rc=0 child ticker
  shift
  log "$what ..."
  setsid "$@" 9>&- &
  child=$!
  (
    trap 'kill "$s" 2>/dev/null; exit 0' TERM
    while :; do sleep "$tick" 9>&- & s=$!; wait "$s"; log "  $what: $((SECONDS - t0)) s so far"; done
  ) 9>&- &
  ticker=$!
  wait "$child" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" || true
  if ((rc)); then log "$what failed (exit $rc) after $((SECONDS - t0)) s"; exit "$rc"; fi
  log "$what: done in $((SECONDS - t0)) s"
}

export GOFLAGS=-mod=mod CGO_ENABLED=0

build_kueue() {
  cd "$work"
  step "fetching sigs.k8s.io/kueue ${KUEUE_VERSION}" \
    go mod download -json "sigs.k8s.io/kueue@${KUEUE_VERSION}" >"$work/kueue.json"
  local dir
  dir="$(sed -n 's/.*"Dir": "\([^"]*\)".*/\1/p' "$work/kueue.json")"
  # `go install pkg@version` builds with the module's own go.mod (no replace directives there)
  step "building kueue ${KUEUE_VERSION} (1 of 1)" env GOFLAGS= GOBIN="$stage" \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kueue/cmd/kueue@${KUEUE_VERSION}" >&2
  mkdir -p "$stage/charts"
  cp -R "$dir/charts/kueue" "$stage/charts/kueue"
  chmod -R u+w "$stage/charts"   # the module cache is read-only
}

build_karpenter() {
  cd "$work"
  # this component's build only: the module's go.mod may need a newer Go than the installed one
  export GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN"
  step "fetching sigs.k8s.io/karpenter ${KARPENTER_VERSION} (and Go ${GOTOOLCHAIN#go})" \
    go mod download -json "sigs.k8s.io/karpenter@${KARPENTER_VERSION}" >"$work/karpenter.json"
  local dir
  dir="$(sed -n 's/.*"Dir": "\([^"]*\)".*/\1/p' "$work/karpenter.json")"
  # the KWOK provider's main package; `go install` names the binary after it (kwok)
  step "building karpenter (KWOK provider) ${KARPENTER_VERSION} (1 of 1)" env GOFLAGS= GOBIN="$work/bin" \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/karpenter/kwok@${KARPENTER_VERSION}" >&2
  mv "$work/bin/kwok" "$stage/karpenter"
  # the CRDs the KWOK chart installs: karpenter.sh's own, with the rules that reserve the
  # karpenter.kwok.sh label domain, and the KWOKNodeClass
  mkdir -p "$stage/crds"
  cp "$dir"/kwok/charts/crds/*.yaml "$dir"/kwok/apis/crds/*.yaml "$stage/crds/"
  chmod -R u+w "$stage/crds"   # the module cache is read-only
}

build_controlplane() {  # (its body is not indented: it holds a heredoc)
mkdir -p "$work/k8s" "$work/etcd"

# --- Kubernetes ---------------------------------------------------------------------------
minor_patch="${K8S_VERSION#v1.}"                    # 37.2
cd "$work/k8s"
go mod init adl.local/k8sassets >/dev/null 2>&1
go mod edit -require="k8s.io/kubernetes@${K8S_VERSION}"
step "fetching k8s.io/kubernetes ${K8S_VERSION}" \
  go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" >"$work/kubernetes.json"
modfile="$(sed -n 's/.*"GoMod": "\(.*\)",/\1/p' "$work/kubernetes.json")"
for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
  go mod edit -replace="$m=$m@v0.${minor_patch}"
done
ver="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION}"
ver+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor_patch%%.*}"
ver+=" -X k8s.io/component-base/version.gitTreeState=clean"
n=0
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  n=$((n + 1))
  step "building $b ${K8S_VERSION} ($n of 4)" \
    go build -trimpath -ldflags "-s -w $ver" -o "$stage/$b" "k8s.io/kubernetes/cmd/$b" >&2
done

# --- etcd ---------------------------------------------------------------------------------
cd "$work/etcd"
go mod init adl.local/etcdassets >/dev/null 2>&1
cat > main.go <<'GO'
// The etcd server binary, from etcd's own entry point.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
step "fetching etcd ${ETCD_VERSION}" go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
step "building etcd ${ETCD_VERSION} (4 of 4)" go build -trimpath -ldflags "-s -w" -o "$stage/etcd" . >&2
}

"build_$component"

# --- into place, all at once ----------------------------------------------------------------
have_all "$stage" || { log "the build left no complete set of binaries in $stage"; exit 1; }
chmod 755 "$stage"
mv -T "$stage" "$out"   # one rename: the cache entry appears complete or not at all
log "built in $((SECONDS - start)) s: $(du -sh "$out" | cut -f1) in $out"
echo "$out"
