// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package tools pins the commands this minor's tests run; it is never compiled into the project.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
