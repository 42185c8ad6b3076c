#!/usr/bin/env bash
# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Builds CSI drivers' node plugins from the Go modules their tools modules pin (hack/drivers/NAME),
# into DEST as NAME-VERSION, so that they run beside the agent on a host that cannot download a
# prebuilt image. A binary that is already there is left alone, and one is moved into place only
# once it is built, so an interrupted build is never mistaken for a done one.
#
# Usage: build.sh DEST [NAME...], NAME one of ebs and gcp-pd; both by default.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${1:?usage: build.sh DEST [NAME...]}
shift
declare -A pkgs=(
  [ebs]=github.com/kubernetes-sigs/aws-ebs-csi-driver/cmd
  [gcp-pd]=sigs.k8s.io/gcp-compute-persistent-disk-csi-driver/cmd/gce-pd-csi-driver
)
# Where each stamps its version, as its own Makefile does: GCP PD's refuses to start without one.
declare -A versionVar=(
  [ebs]=github.com/kubernetes-sigs/aws-ebs-csi-driver/pkg/driver.driverVersion
  [gcp-pd]=main.version
)
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(ebs gcp-pd)
mkdir -p "$dest"
for name in "${names[@]}"; do
  pkg=${pkgs[$name]:-}
  [[ -n $pkg ]] || { echo "build.sh: unknown driver $name (ebs, gcp-pd)" >&2; exit 2; }
  version=$(sed -n 's/^require [^ ]* \(v[^ ]*\)$/\1/p' "$here/$name/go.mod")
  out=$dest/$name-$version
  [[ ! -x $out ]] || continue
  tmp=$(mktemp "$dest/.build.XXXXXX")
  trap 'rm -f "$tmp"' EXIT
  start=$SECONDS
  (cd "$here/$name" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X ${versionVar[$name]}=$version" -o "$tmp" "$pkg")
  mv "$tmp" "$out"
  echo "built $name $version in $((SECONDS - start)) s: $out" >&2
done
