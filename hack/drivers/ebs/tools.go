// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package ebs pins the AWS EBS CSI driver's command; it is never compiled into the project.
package ebs

import (
	_ "github.com/kubernetes-sigs/aws-ebs-csi-driver/cmd"
)
