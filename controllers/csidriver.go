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

// reportCSIDriver reads the group's CSIDriver, once its driver has told its name, and reports
// whether it sets preventPodSchedulingIfMissing. A read that fails for another reason than the
// object's absence or a refusal is tried again at the next reconcile.
func (r *NodeReconciler) reportCSIDriver(ctx context.Context, g *group) {
	name := g.driverName()
	if g.csiDriverReported || name == "" {
		return
	}
	logger := log.FromContext(ctx).WithValues("driver", name)
	d := &storagev1.CSIDriver{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Name: name}, d)
	switch {
	case apierrors.IsForbidden(err):
		g.csiDriverReported = true
		logger.Info("cannot read the driver's CSIDriver to tell whether the scheduler's own check keeps pods off this node; "+
			"the install's role lacks get on csidrivers", "error", err.Error())
		return
	case err != nil && !apierrors.IsNotFound(err):
		logger.V(4).Info("reading the driver's CSIDriver", "error", err.Error())
		return
	}
	g.csiDriverReported = true
	set := err == nil && d.Spec.PreventPodSchedulingIfMissing != nil && *d.Spec.PreventPodSchedulingIfMissing
	r.metrics.CSIDriverPreventsScheduling.WithLabelValues(name).Set(boolToFloat(set))
	if set {
		logger.Info("the driver's CSIDriver sets preventPodSchedulingIfMissing: on Kubernetes 1.37 and later the scheduler keeps " +
			"pods with its PVC-backed volumes off this node until CSINode lists the driver; the startup taint still covers " +
			"CSI inline volumes, the driver's Probe health, older clusters and continuous mode")
		return
	}
	logger.Info("the driver's CSIDriver does not set preventPodSchedulingIfMissing (or there is none): the startup taint " +
		"is what keeps pods off this node until the driver is registered")
}
