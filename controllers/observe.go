// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// RegistrationWindow is how young a Node must be, when the agent first sees it without a group's
// startup taints and with no record of their removal, for that to be reported as a Node that
// registered without them (startuptaint.EventReasonRegisteredWithoutTaint). An older Node is one
// the agent was installed on, or restarted on, long after its registration: reporting those would
// raise one event per node of a fleet at every rollout.
const RegistrationWindow = 10 * time.Minute

// observe reads what the group's decision rests on: which of its startup taints the Node carries
// and what changed since the last reconcile (nodeState.observe), and, once, its driver's
// CSIDriver. It returns false while the group's taints are not known yet.
func (r *NodeReconciler) observe(ctx context.Context, g *group, node *corev1.Node, now time.Time) (observed, bool) {
	putsBack := r.putsBack(g, node)
	specs := g.taintSpecs(putsBack)
	if len(specs) == 0 {
		log.FromContext(ctx).V(4).Info("waiting for the driver's name to know its startup taint")
		return observed{}, false
	}
	return observed{specs: specs, startup: g.startupSpecs(), putsBack: putsBack, bootedAgain: g.bootedAgain(node),
		obs: g.state.observe(node, specs, g.putBackKey(putsBack), now), csiDriver: r.readCSIDriver(ctx, g)}, true
}

// startupSpecs are the group's startup taints as configured: its Taints, or the CSI driver's
// default once its name is known.
func (g *group) startupSpecs() []startuptaint.TaintSpec {
	if len(g.Taints) > 0 {
		return g.Taints
	}
	if name := g.driverName(); name != "" {
		return []startuptaint.TaintSpec{startuptaint.DefaultTaintSpec(name)}
	}
	return nil
}

// taintSpecs are the group's startup taints and, when putBack and they do not select it, the
// taint an agent puts back (startuptaint.RetaintSpec; see NodeReconciler.putsBack).
func (g *group) taintSpecs(putBack bool) []startuptaint.TaintSpec {
	specs := g.startupSpecs()
	if len(specs) == 0 || !putBack {
		return specs
	}
	back := startuptaint.RetaintSpec(specs)
	if len(startuptaint.MatchingTaints([]corev1.Taint{{Key: back.Key, Effect: back.Effect}}, specs)) > 0 {
		return specs
	}
	return append(slices.Clip(specs), back)
}

// putBackKey is startuptaint.RetaintSpec's String when putBack, and empty otherwise or before the
// group's taints are known.
func (g *group) putBackKey(putBack bool) string {
	if specs := g.startupSpecs(); putBack && len(specs) > 0 {
		return startuptaint.RetaintSpec(specs).String()
	}
	return ""
}

// putsBack reports whether the group's taint in the form an agent puts back
// (startuptaint.RetaintSpec) is the agent's to remove: in continuous mode, and on a Node whose boot
// was recorded for the group, where an agent puts it back after a reboot or at a shutdown.
// Elsewhere a taint of the same key in that form is another writer's, unless a spec selects it.
func (r *NodeReconciler) putsBack(g *group, node *corev1.Node) bool {
	specs := g.startupSpecs()
	if len(specs) == 0 {
		return false
	}
	_, recorded := startuptaint.RecordedBoot(node, startuptaint.RetaintSpec(specs).Key)
	return r.RetaintAfter > 0 || recorded
}

// observation is what observing the Node's taints found.
type observation struct {
	// held are the node's taints that the specs select.
	held []corev1.Taint
	// present is, by spec, whether it is on the node.
	present map[string]bool
	// cameBack are the specs that are back since their last removal.
	cameBack []string
	// ended is set when the taints went without this agent removing them: another writer did.
	ended bool
	// heldCameBack is set when a held taint came back after an earlier removal.
	heldCameBack bool
	// registeredWithout is set at the first observation of a Node younger than RegistrationWindow
	// that carries none of the specs and whose startuptaint.RemovedAnnotation names none of them:
	// it registered without the group's startup taints.
	registeredWithout bool
}

// rebooted reports whether the Node booted again since key's boot was recorded.
func rebooted(n *corev1.Node, key string) bool {
	boot := startuptaint.BootID(n)
	recorded, ok := startuptaint.RecordedBoot(n, key)
	return boot != "" && ok && recorded != boot
}

// bootedAgain reports whether node booted again since the group's gates last passed, by the boot
// record of the taint an agent puts back: then what a reboot leaves stale cannot count
// (gates.AfterReboot).
func (g *group) bootedAgain(node *corev1.Node) bool {
	specs := g.startupSpecs()
	return len(specs) > 0 && rebooted(node, startuptaint.RetaintSpec(specs).Key)
}

// The scheduler's own CSI check (a CSIDriver's preventPodSchedulingIfMissing, Kubernetes 1.37): read
// once per process, once the driver has told its name (so one read, not a cache by name), and
// reported as a gauge and a log line, never an event (docs/observability.md says why).

// driverName is the name the group's CSI driver told, or "" before it has (or without one).
func (g *group) driverName() string {
	for _, gate := range g.Gates {
		if n, ok := gate.(gates.DriverNamer); ok {
			return n.DriverName()
		}
	}
	return ""
}

// csiDriverFound is what the one read of a group's CSIDriver found.
type csiDriverFound struct {
	name string
	// prevents: the CSIDriver sets preventPodSchedulingIfMissing.
	prevents bool
	// forbidden is the API server's refusal when the install's role lacks get on csidrivers.
	forbidden error
}

// readCSIDriver reads the group's CSIDriver, once its driver has told its name, and returns what
// it found; nil before the name is known, after the read, and when the read failed for another
// reason than the object's absence or a refusal, which the next reconcile tries again.
func (r *NodeReconciler) readCSIDriver(ctx context.Context, g *group) *csiDriverFound {
	name := g.driverName()
	if g.csiDriverRead || name == "" {
		return nil
	}
	d := &storagev1.CSIDriver{}
	err := r.wired.apiReader.Get(ctx, client.ObjectKey{Name: name}, d)
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		log.FromContext(ctx).V(4).Info("reading the driver's CSIDriver", "driver", name, "error", err.Error())
		return nil
	}
	g.csiDriverRead = true
	found := &csiDriverFound{name: name}
	if apierrors.IsForbidden(err) {
		found.forbidden = err
		return found
	}
	found.prevents = err == nil && d.Spec.PreventPodSchedulingIfMissing != nil && *d.Spec.PreventPodSchedulingIfMissing
	return found
}
