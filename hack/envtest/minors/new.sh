#!/usr/bin/env bash
# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Writes the tools module that builds another minor's kube-apiserver, and kubemark where the release
# still has it (1.38 no longer does): it requires
# k8s.io/kubernetes at that tag and replaces each staging module (k8s.io/api, ...), which
# k8s.io/kubernetes requires as v0.0.0, with the same release's v0.<minor>.<patch>.
# Its go line is the newer of hack/envtest's and the release's own, and its toolchain hack/envtest's,
# or GO_TOOLCHAIN for a release that needs a newer Go (1.38 needs Go 1.27).
# Usage: [GO_TOOLCHAIN=go1.27.4] hack/envtest/minors/new.sh 1.33.13 (then commit hack/envtest/minors/v1.33).
set -euo pipefail
version=${1:?usage: new.sh MAJOR.MINOR.PATCH}
IFS=. read -r major minor patch <<<"$version"
dir=$(cd "$(dirname "$0")" && pwd)/v$major.$minor
mkdir -p "$dir"
cd "$dir"
rm -f go.mod go.sum
toolchain=${GO_TOOLCHAIN:-$(sed -n 's/^toolchain //p' "$dir/../../go.mod")}
# The release's go.mod, downloaded with the toolchain that builds it.
download=$(GOTOOLCHAIN=$toolchain go mod download -json "k8s.io/kubernetes@v$version")
gomod=$(sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p' <<<"$download")
source=$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$download")
[[ -n $gomod ]] || { echo "new.sh: k8s.io/kubernetes v$version: no go.mod (does it need a newer GO_TOOLCHAIN?)" >&2; exit 1; }
commands=(kube-apiserver)
[[ ! -d $source/cmd/kubemark ]] || commands+=(kubemark)
goline=$(printf '%s\n' "$(sed -n 's/^go //p' "$dir/../../go.mod")" "$(sed -n 's/^go //p' "$gomod")" | sort -V | tail -1)
{
  echo "// Module v$major.$minor builds ${commands[*]} v$version for the tests on every supported"
  echo "// minor (hack/envtest/build.sh); written by hack/envtest/minors/new.sh."
  echo "module github.com/startup-taint-remover/startup-taint-remover/hack/envtest/minors/v$major.$minor"
  echo
  echo "go $goline"
  echo
  echo "toolchain $toolchain"
  echo
  echo "require k8s.io/kubernetes v$version"
  echo
  echo "replace ("
  awk '/^\tk8s\.io\/[^ ]+ v0\.0\.0$/ {print $1}' "$gomod" | sort -u |
    while read -r m; do printf '\t%s => %s v0.%s.%s\n' "$m" "$m" "$minor" "$patch"; done
  echo ")"
} >go.mod
cat >tools.go <<GO
// Copyright $(date +%Y) The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the commands this minor's tests run; it is never compiled into the project.
package tools

import (
$(printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${commands[@]}")
)
GO
GOTOOLCHAIN=$toolchain go mod tidy
