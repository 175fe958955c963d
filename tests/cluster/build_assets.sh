#!/usr/bin/env bash
# Builds the real control plane the `cluster` tests run on, from the Go module proxy:
# kube-apiserver, kube-controller-manager and kube-scheduler from k8s.io/kubernetes, and etcd
# from go.etcd.io/etcd/server. Versions are pinned in versions.env beside this script.
#
# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every k8s.io/<staging> module
# with a local path. So we make a throwaway module that requires it and replaces each staging
# module with its published v0.<minor>.<patch> tag instead. etcd's own main module has the same
# problem; its server module exports etcdmain, so a three-line main of ours runs it.
#
# Prints the directory holding the four binaries on its last line of stdout.
#   ADL_K8S_ASSETS=DIR   use prebuilt binaries from DIR (like setup-envtest's KUBEBUILDER_ASSETS)
#   ADL_K8S_CACHE=DIR    where built binaries are kept (default ~/.cache/adl/k8s)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
bins=(kube-apiserver kube-controller-manager kube-scheduler etcd)

have_all() { for b in "${bins[@]}"; do [[ -x "$1/$b" ]] || return 1; done; }

if [[ -n "${ADL_K8S_ASSETS:-}" ]]; then
  if have_all "$ADL_K8S_ASSETS"; then echo "$ADL_K8S_ASSETS"; exit 0; fi
  echo "ADL_K8S_ASSETS=$ADL_K8S_ASSETS lacks one of: ${bins[*]}" >&2; exit 2
fi

out="${ADL_K8S_CACHE:-$HOME/.cache/adl/k8s}/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}"
if have_all "$out"; then echo "$out"; exit 0; fi

command -v go >/dev/null || { echo "go is needed to build the control plane (or set ADL_K8S_ASSETS)" >&2; exit 2; }
work="$(mktemp -d)"; trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/k8s" "$work/etcd"
export GOFLAGS=-mod=mod CGO_ENABLED=0
start=$(date +%s)

# --- Kubernetes ---------------------------------------------------------------------------
minor_patch="${K8S_VERSION#v1.}"                    # 37.2
cd "$work/k8s"
go mod init adl.local/k8sassets >/dev/null 2>&1
go mod edit -require="k8s.io/kubernetes@${K8S_VERSION}"
modfile="$(go mod download -json "k8s.io/kubernetes@${K8S_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')"
for m in $(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\1#p' "$modfile"); do
  go mod edit -replace="$m=$m@v0.${minor_patch}"
done
ver="-X k8s.io/component-base/version.gitVersion=${K8S_VERSION}"
ver+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor_patch%%.*}"
ver+=" -X k8s.io/component-base/version.gitTreeState=clean"
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  echo "building $b ${K8S_VERSION} ..." >&2
  go build -trimpath -ldflags "-s -w $ver" -o "$out/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv "$out/$b.tmp" "$out/$b"
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
go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
echo "building etcd ${ETCD_VERSION} ..." >&2
go build -trimpath -ldflags "-s -w" -o "$out/etcd.tmp" .
mv "$out/etcd.tmp" "$out/etcd"

echo "built in $(( $(date +%s) - start )) s: $(du -sh "$out" | cut -f1) in $out" >&2
echo "$out"
