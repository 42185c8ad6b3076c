#!/usr/bin/env bash
# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Writes the tools module that builds another minor's kube-apiserver and kubemark: it requires
# k8s.io/kubernetes at that tag and replaces each staging module (k8s.io/api, ...), which
# k8s.io/kubernetes requires as v0.0.0, with the same release's v0.<minor>.<patch>.
# Usage: hack/envtest/minors/new.sh 1.33.13 (then commit hack/envtest/minors/v1.33).
set -euo pipefail
version=${1:?usage: new.sh MAJOR.MINOR.PATCH}
IFS=. read -r major minor patch <<<"$version"
dir=$(cd "$(dirname "$0")" && pwd)/v$major.$minor
mkdir -p "$dir"
cd "$dir"
rm -f go.mod go.sum
gomod=$(go mod download -json "k8s.io/kubernetes@v$version" | sed -n 's/^\t"GoMod": "\(.*\)",$/\1/p')
{
  echo "// Module v$major.$minor builds kube-apiserver and kubemark v$version for the tests on every supported"
  echo "// minor (hack/envtest/build.sh); written by hack/envtest/minors/new.sh."
  echo "module github.com/startup-taint-remover/startup-taint-remover/hack/envtest/minors/v$major.$minor"
  echo
  grep "^go " "$dir/../../go.mod"
  echo
  grep "^toolchain " "$dir/../../go.mod"
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
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubemark"
)
GO
go mod tidy
