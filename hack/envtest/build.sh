#!/usr/bin/env bash
# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Builds kube-apiserver and etcd from their Go modules into the directory layout setup-envtest
# uses, so envtest runs on hosts that cannot download prebuilt binaries, and beside them kubemark,
# whose hollow node runs the real kubelet code with a fake container runtime, and the scheduler and
# controller manager, which place a workload on it. A binary that is already there is left alone:
# the first build takes minutes, later ones are never needed.
#
# Usage: build.sh DEST [BINARY...]. ENVTEST_K8S_VERSION names the release. The main release
# (hack/envtest/go.mod's) builds every binary by default; another minor builds from its own tools
# module (hack/envtest/minors/vMAJOR.MINOR, written by minors/new.sh) the binaries named, and its
# tests share the main release's etcd (ETCD, linked into DEST).
set -euo pipefail

version=${ENVTEST_K8S_VERSION:?ENVTEST_K8S_VERSION is required, e.g. 1.37.2}
dest=${1:?usage: build.sh DEST_DIR [BINARY...]}
shift
here=$(cd "$(dirname "$0")" && pwd)

IFS=. read -r major minor _ <<<"$version"
module=$here
if ! grep -q "^	k8s.io/kubernetes v$version$" "$here/go.mod"; then
  module=$here/minors/v$major.$minor
  grep -q "^require k8s.io/kubernetes v$version$" "$module/go.mod" 2>/dev/null || {
    echo "build.sh: no tools module builds Kubernetes $version: run hack/envtest/minors/new.sh $version" >&2
    exit 2
  }
fi
wanted=("$@")
if [[ ${#wanted[@]} -eq 0 ]]; then
  wanted=(kube-apiserver etcd kubemark kube-scheduler kube-controller-manager)
fi
mkdir -p "$dest"
if [[ -n ${ETCD:-} && ! -e $dest/etcd ]]; then
  ln -s "$ETCD" "$dest/etcd"
fi

declare -A pkgs=(
  [kube-apiserver]=k8s.io/kubernetes/cmd/kube-apiserver
  [etcd]=go.etcd.io/etcd/server/v3
  [kubemark]=k8s.io/kubernetes/cmd/kubemark
  [kube-scheduler]=k8s.io/kubernetes/cmd/kube-scheduler
  [kube-controller-manager]=k8s.io/kubernetes/cmd/kube-controller-manager
)
missing=()
for bin in "${wanted[@]}"; do
  [[ -n ${pkgs[$bin]:-} ]] || { echo "build.sh: unknown binary $bin" >&2; exit 2; }
  [[ -x $dest/$bin ]] || missing+=("$bin")
done
[[ ${#missing[@]} -gt 0 ]] || exit 0

tmp=$(mktemp -d "$dest/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=v$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"

cd "$module"
# One go build for every missing binary: they share most packages, and on a fresh machine one
# invocation keeps both cores busy through the links, which separate builds run one at a time.
# etcd's main package is go.etcd.io/etcd/server/v3, which go build names "server".
echo "building ${missing[*]} v$version into $dest (first time only; takes minutes)" >&2
args=()
for bin in "${missing[@]}"; do args+=("${pkgs[$bin]}"); done
# The -X flags set the Kubernetes binaries' version; go ignores them for a binary without that package.
CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/" "${args[@]}"
[[ ! -e $tmp/server ]] || mv "$tmp/server" "$tmp/etcd"
# Each binary is moved into place only once all are built, so an interrupted build is never
# mistaken for a done one.
for bin in "${missing[@]}"; do
  mv "$tmp/$bin" "$dest/$bin"
done
