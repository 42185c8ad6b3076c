#!/usr/bin/env bash
# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Runs a test command (COMMAND ARGS...) and, when it fails because the tests' kube-apiserver exited
# under them (every later request is refused), runs it once more and says so. kube-apiserver can
# die of a concurrent map access while it evaluates admission policies' CEL
# (kubernetes/kubernetes#135757); a run of the manifests suite on 1.33.13 hit it once. Any other
# failure fails at once.
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ] && grep -q 'dial tcp 127.0.0.1:[0-9]*: connect: connection refused' "$log"; then
	echo "retry-on-exit.sh: the tests' kube-apiserver stopped answering (refused connections); running once more" >&2
	"$@"
	exit $?
fi
exit "$status"
