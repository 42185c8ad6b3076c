// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"slices"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Driver says whether a CSI driver the installs serve asks the scheduler to keep pods off nodes
// whose CSINode lacks it (CSIDriver spec.preventPodSchedulingIfMissing, Kubernetes 1.37+), as
// each agent reports with startup_taint_csi_driver_prevents_scheduling.
type Driver struct {
	Name string `json:"name"`
	// Found is false when the cluster has no CSIDriver object of that name.
	Found bool `json:"found"`
	// PreventPodSchedulingIfMissing is the CSIDriver's field.
	PreventPodSchedulingIfMissing bool `json:"preventPodSchedulingIfMissing"`
}

// drivers reads the CSIDriver of each driver whose conventional taint an install names. A user who
// may not read CSIDrivers gets none, silently: the list of taints does not depend on them.
func drivers(ctx context.Context, c kubernetes.Interface, installs []install) []Driver {
	var names []string
	for _, in := range installs {
		for _, spec := range in.specs {
			if name, ok := startuptaint.DriverOf(spec); ok && !slices.Contains(names, name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	out := make([]Driver, 0, len(names))
	for _, name := range names {
		d, err := c.StorageV1().CSIDrivers().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			out = append(out, Driver{Name: name})
		case err != nil:
			return nil
		default:
			set := d.Spec.PreventPodSchedulingIfMissing != nil && *d.Spec.PreventPodSchedulingIfMissing
			out = append(out, Driver{Name: name, Found: true, PreventPodSchedulingIfMissing: set})
		}
	}
	return out
}

// driverLine says what a driver's CSIDriver means for its installs.
func driverLine(d Driver) string {
	switch {
	case !d.Found:
		return fmt.Sprintf("CSIDriver %s: none in the cluster; the startup taint is what keeps pods off its nodes.", d.Name)
	case d.PreventPodSchedulingIfMissing:
		return fmt.Sprintf("CSIDriver %s: preventPodSchedulingIfMissing is set; the scheduler also keeps pods with its "+
			"PVC-backed volumes off nodes whose CSINode lacks it (not inline volumes, nor the driver's health).", d.Name)
	}
	return fmt.Sprintf("CSIDriver %s: preventPodSchedulingIfMissing is not set; the startup taint is what keeps pods off its nodes.", d.Name)
}
