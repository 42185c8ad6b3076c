// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package kustomize pins the kustomize command that hack/kustomize/build.sh builds, once per
// module file; it is never compiled into the project.
package kustomize

import (
	_ "sigs.k8s.io/kustomize/kustomize/v5"
)
