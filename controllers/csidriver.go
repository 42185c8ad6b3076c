// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
)

// The scheduler's own CSI check (KEP-5030, beta and on by default from Kubernetes 1.37): a
// CSIDriver with spec.preventPodSchedulingIfMissing keeps a pod with a PVC-backed volume of that
// driver off a node until the node's CSINode lists the driver. It does not cover CSI inline
// volumes, the driver's Probe health, or a driver that fails later, which the startup taint does.
//
// The agent reads its driver's CSIDriver once per process, once the driver has told its name
// (which is why it is one read, not a cache by name like the CSINode's: the name is not known when
// the cache starts), and reports what it means for this install: the gauge
// startup_taint_csi_driver_prevents_scheduling and one log line. No event: on a 5,000-node fleet
// an event per node at every rollout is 5,000 writes saying the same thing, while the gauge costs
// nothing to write and `count by (driver)` answers for the fleet.

// +kubebuilder:rbac:groups=storage.k8s.io,resources=csidrivers,verbs=get

// driverName is the name the group's CSI driver told, or "" before it has (or without one).
func (g *group) driverName() string {
	for _, gate := range g.Gates {
		if n, ok := gate.(gates.DriverNamer); ok {
			return n.DriverName()
		}
	}
	return ""
}

// csiDriverRead is what the one read of a group's CSIDriver found.
type csiDriverRead struct {
	name string
	// prevents: the CSIDriver sets preventPodSchedulingIfMissing.
	prevents bool
	// forbidden is the API server's refusal when the install's role lacks get on csidrivers.
	forbidden error
}

// readCSIDriver reads the group's CSIDriver, once its driver has told its name, and returns what
// it found; ok is false before the name is known, after the read, and when the read failed for
// another reason than the object's absence or a refusal, which the next reconcile tries again.
func (r *NodeReconciler) readCSIDriver(ctx context.Context, g *group) (read csiDriverRead, ok bool) {
	name := g.driverName()
	if g.csiDriverRead || name == "" {
		return read, false
	}
	d := &storagev1.CSIDriver{}
	err := r.wired.reader.Get(ctx, client.ObjectKey{Name: name}, d)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		log.FromContext(ctx).V(4).Info("reading the driver's CSIDriver", "driver", name, "error", err.Error())
		return read, false
	}
	g.csiDriverRead = true
	read.name = name
	if apierrors.IsForbidden(err) {
		read.forbidden = err
		return read, true
	}
	read.prevents = err == nil && d.Spec.PreventPodSchedulingIfMissing != nil && *d.Spec.PreventPodSchedulingIfMissing
	return read, true
}
