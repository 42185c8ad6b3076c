#!/usr/bin/env bash
# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Builds kustomize releases into DEST as kustomize-vX.Y.Z, each from its module file here
# (kustomize-vX.Y.Z.mod and .sum), the named VERSIONs or, with none named, every one. A binary that
# is already there is left alone, so each version is built once.
set -euo pipefail

dest=${1:?usage: build.sh DEST_DIR [VERSION...]}
shift
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dest"
dest=$(cd "$dest" && pwd)

if (($# == 0)); then
  for mod in "$here"/kustomize-v*.mod; do
    v=${mod##*/kustomize-}
    set -- "$@" "${v%.mod}"
  done
fi

for v in "$@"; do
  [[ -x $dest/kustomize-$v ]] && continue
  [[ -f $here/kustomize-$v.mod ]] || { echo "build.sh: no module file hack/kustomize/kustomize-$v.mod" >&2; exit 2; }
  echo "building kustomize $v into $dest (first time only)" >&2
  # Built under a temporary name and moved into place, so an interrupted build is never mistaken
  # for a done one.
  (cd "$here" && CGO_ENABLED=0 go build -trimpath -modfile="kustomize-$v.mod" -ldflags "-s -w" \
    -o "$dest/.kustomize-$v.tmp" sigs.k8s.io/kustomize/kustomize/v5)
  mv "$dest/.kustomize-$v.tmp" "$dest/kustomize-$v"
done
