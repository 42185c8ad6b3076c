#!/usr/bin/env bash
# Builds kube-apiserver and etcd from their Go modules into the directory layout setup-envtest
# uses, so envtest runs on hosts that cannot download prebuilt binaries, and beside them kubemark,
# whose hollow node runs the real kubelet code with a fake container runtime, and the scheduler and
# controller manager, which place a workload on it. A binary that is already there is left alone:
# the first build takes minutes, later ones are never needed.
set -euo pipefail

version=${ENVTEST_K8S_VERSION:?ENVTEST_K8S_VERSION is required, e.g. 1.37.2}
dest=${1:?usage: build.sh DEST_DIR}
here=$(cd "$(dirname "$0")" && pwd)

if [[ -x $dest/kube-apiserver && -x $dest/etcd && -x $dest/kubemark && -x $dest/kube-scheduler &&
  -x $dest/kube-controller-manager ]]; then
  exit 0
fi

mkdir -p "$dest"
tmp=$(mktemp -d "$dest/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

IFS=. read -r major minor _ <<<"$version"
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=v$version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"

cd "$here"
# Each binary is moved into place only once built, so an interrupted build is never mistaken for
# a done one.
if [[ ! -x $dest/kube-apiserver || ! -x $dest/etcd ]]; then
  echo "building kube-apiserver v$version and etcd into $dest (first time only; takes minutes)" >&2
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
  CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
  mv "$tmp/etcd" "$dest/etcd"
  mv "$tmp/kube-apiserver" "$dest/kube-apiserver"
fi
if [[ ! -x $dest/kubemark ]]; then
  echo "building kubemark v$version (the hollow kubelet) into $dest (first time only; takes minutes)" >&2
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/kubemark" k8s.io/kubernetes/cmd/kubemark
  mv "$tmp/kubemark" "$dest/kubemark"
fi
# Built after kube-apiserver, from the same module and build cache: about a minute each.
for cmd in kube-scheduler kube-controller-manager; do
  if [[ ! -x $dest/$cmd ]]; then
    echo "building $cmd v$version into $dest (first time only)" >&2
    CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/$cmd" "k8s.io/kubernetes/cmd/$cmd"
    mv "$tmp/$cmd" "$dest/$cmd"
  fi
done
