// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build tools

// Package gcppd pins the GCP Compute Persistent Disk CSI driver's command; it is never compiled into the project.
package gcppd

import (
	_ "sigs.k8s.io/gcp-compute-persistent-disk-csi-driver/cmd/gce-pd-csi-driver"
)
