package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// Group is one set of startup taints and the readiness gates that hold them. A node often runs
// several agents, each with its own startup taint (a disk and a file CSI driver, a CNI agent): one
// reconciler can serve them all, each group's taints removed as soon as that group's gates pass,
// whatever the others' do. The fields mean what the NodeReconciler fields of the same names mean
// for the single group it has when Groups is empty.
type Group struct {
	// Name identifies the group in logs, events and the gate label of the metrics ("ebs" gives
	// "ebs/csi"); a DNS label, unique among the groups. It may be empty only for a lone group.
	Name string
	// Taints are the group's startup taints; see NodeReconciler.Taints.
	Taints []TaintSpec
	// CSI, RequireCSINode and RequireAllocatable are the group's CSI gates.
	CSI                *CSIGate
	RequireCSINode     bool
	RequireAllocatable bool
	// Gates are further local readiness checks.
	Gates []Gate
	// ReadyContainer names a container of the agent's own Pod (NodeReconciler.Pod).
	ReadyContainer string
	// RequireResources and RequireResourceSlices are the device plugin and DRA gates.
	RequireResources      []ResourceRequirement
	RequireResourceSlices []string
	// RequireConditions are Node conditions, each with its status, that must hold.
	RequireConditions []ConditionRequirement
	// ConditionType, when set, publishes this group's verdict as a Node condition of this type.
	ConditionType string
}

// group is a Group at work: its gates' state and its episodes on the Node.
type group struct {
	Group
	prober *prober
	// cached are the gates that read API objects, checked at each reconcile in this order;
	// passing is when each started passing.
	cached  []cachedCheck
	passing passingSince
	state   nodeState
}

// configuredGroups returns the reconciler's groups as configured: Groups, or the one group its
// own fields describe.
func (r *NodeReconciler) configuredGroups() []Group {
	if len(r.Groups) > 0 {
		return r.Groups
	}
	return []Group{{Taints: r.Taints, CSI: r.CSI, RequireCSINode: r.RequireCSINode, RequireAllocatable: r.RequireAllocatable,
		Gates: r.Gates, ReadyContainer: r.ReadyContainer, RequireResources: r.RequireResources,
		RequireResourceSlices: r.RequireResourceSlices, ConditionType: r.ConditionType}}
}

// usesGroupFields reports whether any of the fields that Groups replaces is set.
func (r *NodeReconciler) usesGroupFields() bool {
	return len(r.Taints) > 0 || r.CSI != nil || r.RequireCSINode || r.RequireAllocatable || len(r.Gates) > 0 ||
		r.ReadyContainer != "" || len(r.RequireResources) > 0 || len(r.RequireResourceSlices) > 0 || r.ConditionType != ""
}

// validateGroups checks each group, and that no two groups share a name, a taint key or a
// condition type: each taint must have one group whose gates decide it.
func (r *NodeReconciler) validateGroups() error {
	if len(r.Groups) > 0 && r.usesGroupFields() {
		return errors.New("NodeReconciler: Groups replaces Taints, CSI, RequireCSINode, RequireAllocatable, Gates, " +
			"ReadyContainer, RequireResources, RequireResourceSlices and ConditionType; set those in each group")
	}
	groups := r.configuredGroups()
	names, keys, conditions := map[string]bool{}, map[string]string{}, map[string]bool{}
	for i, g := range groups {
		where := "NodeReconciler: "
		if len(r.Groups) > 0 {
			where = fmt.Sprintf("NodeReconciler: Groups[%d]: ", i)
		}
		if err := r.validateGroup(g); err != nil {
			return fmt.Errorf("%s%w", where, err)
		}
		switch {
		case len(groups) > 1 && len(validation.IsDNS1123Label(g.Name)) > 0:
			return fmt.Errorf("%sName %q is not a DNS label (each of several groups needs one)", where, g.Name)
		case names[g.Name]:
			return fmt.Errorf("%sName %q is taken by another group", where, g.Name)
		case g.ConditionType != "" && conditions[g.ConditionType]:
			return fmt.Errorf("%sConditionType %q is another group's", where, g.ConditionType)
		}
		names[g.Name], conditions[g.ConditionType] = true, true
		for _, spec := range g.Taints {
			if other, ok := keys[spec.Key]; ok && other != g.Name {
				return fmt.Errorf("%staint key %s is also group %q's: each taint has one group", where, spec.Key, other)
			}
			keys[spec.Key] = g.Name
		}
	}
	return nil
}

// validateGroup checks one group's fields.
func (r *NodeReconciler) validateGroup(g Group) error {
	switch {
	case len(r.cachedGates(g)) == 0 && g.CSI == nil && len(g.Gates) == 0:
		return errors.New("at least one readiness gate is required " +
			"(CSI, Gates, ReadyContainer, RequireResources, RequireResourceSlices or RequireConditions)")
	case g.ReadyContainer != "" && (r.Pod.Name == "" || r.Pod.Namespace == ""):
		return errors.New("ReadyContainer needs Pod, the agent's own Pod")
	case g.CSI == nil && len(g.Taints) == 0:
		return errors.New("without a CSI driver to name the default taint, Taints is required")
	case g.RequireCSINode && g.CSI == nil:
		return errors.New("RequireCSINode needs CSI")
	case g.RequireAllocatable && !g.RequireCSINode:
		return errors.New("RequireAllocatable needs RequireCSINode")
	case r.RetaintAfter > 0 && len(g.Taints) == 0:
		return errors.New("RetaintAfter needs Taints, the first of which it puts back")
	}
	if g.ConditionType != "" {
		if err := ValidateConditionType(g.ConditionType); err != nil {
			return fmt.Errorf("ConditionType: %w", err)
		}
	}
	return nil
}

// buildGroup makes a group's gates, once the reconciler's Client and Clock are set.
func (r *NodeReconciler) buildGroup(cfg Group, interval time.Duration) *group {
	g := &group{Group: cfg, passing: passingSince{}}
	var gates []Gate
	if g.CSI != nil {
		gates = append(gates, g.CSI)
	}
	gates = append(gates, g.Gates...)
	g.prober = newProber(gates, interval, r.NodeName, g.Name, r.Clock)
	for _, gate := range r.cachedGates(cfg) {
		g.cached = append(g.cached, cachedCheck{gate: gate})
	}
	return g
}

// cachedGates returns the gates of cfg that read API objects, in the order they are checked. They
// hold no client, so the manager's options can be collected from them before it exists.
func (r *NodeReconciler) cachedGates(cfg Group) []cachedGate {
	var gates []cachedGate
	if cfg.RequireCSINode && cfg.CSI != nil {
		gates = append(gates, &csiNodeGate{node: r.NodeName, driver: cfg.CSI.DriverName, requireAllocatable: cfg.RequireAllocatable})
	}
	if cfg.ReadyContainer != "" {
		gates = append(gates, &containerGate{pod: r.Pod, container: cfg.ReadyContainer})
	}
	if len(cfg.RequireResources) > 0 {
		gates = append(gates, &resourceGate{required: cfg.RequireResources})
	}
	if len(cfg.RequireResourceSlices) > 0 {
		gates = append(gates, &resourceSliceGate{node: r.NodeName, drivers: cfg.RequireResourceSlices})
	}
	if len(cfg.RequireConditions) > 0 {
		gates = append(gates, &nodeConditionGate{required: cfg.RequireConditions})
	}
	return gates
}

// anyGroup reports whether has holds for any of the built groups.
func (r *NodeReconciler) anyGroup(has func(*group) bool) bool {
	return slices.ContainsFunc(r.groups, has)
}

// logContext adds the group's name to the logger in ctx, when it has one.
func (g *group) logContext(ctx context.Context) context.Context {
	if g.Name == "" {
		return ctx
	}
	return log.IntoContext(ctx, log.FromContext(ctx).WithValues("group", g.Name))
}

// taintSpecs returns the group's specs, with the taint continuous mode puts back when they do
// not select it, or the CSI driver's default once its name is known.
func (g *group) taintSpecs(retaintAfter time.Duration) []TaintSpec {
	if len(g.Taints) > 0 {
		if retaintAfter <= 0 {
			return g.Taints
		}
		retaint := RetaintSpec(g.Taints)
		if len(MatchingTaints([]corev1.Taint{{Key: retaint.Key, Effect: retaint.Effect}}, g.Taints)) > 0 {
			return g.Taints
		}
		return append(slices.Clip(g.Taints), retaint)
	}
	if name := g.CSI.DriverName(); name != "" {
		return []TaintSpec{DefaultTaintSpec(name)}
	}
	return nil
}

// retaintKey is RetaintSpec's String in continuous mode, and empty otherwise.
func (g *group) retaintKey(retaintAfter time.Duration) string {
	if retaintAfter <= 0 {
		return ""
	}
	return RetaintSpec(g.Taints).String()
}

// checkGates returns the group's first gate that does not pass, or nil and the time since when
// all pass. It evaluates every gate, so the gate metrics stay current.
func (g *group) checkGates(ctx context.Context, reader client.Reader, node *corev1.Node, now time.Time) (*gateError, time.Time) {
	local, since := g.prober.notReady()
	var first *gateError
	for i := range g.cached {
		c := &g.cached[i]
		gerr := c.log.report(ctx, g.Name, c.gate.name(), c.gate.check(ctx, reader, node))
		since = maxTime(since, g.passing.observe(c.gate.name(), gerr, now))
		if first == nil {
			first = gerr
		}
	}
	if local != nil && first == nil {
		// Only the local gates hold the taint now that something changed (kubelet registered the
		// driver, the taint came back): the driver may have turned ready since the last tick, so
		// probe it now rather than up to an interval later.
		g.prober.probeNow()
	}
	for _, gerr := range []*gateError{local, first} {
		if gerr != nil {
			return gerr.inGroup(g.Name), time.Time{}
		}
	}
	return nil, since
}
