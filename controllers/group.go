// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// Group is one set of startup taints and the readiness gates that hold them. A node often runs
// several agents, each with its own startup taint (a disk and a file CSI driver, a CNI agent): one
// reconciler can serve them all, each group's taints removed as soon as that group's gates pass,
// whatever the others' do.
type Group struct {
	// Name identifies the group in logs, events and the gate label of the metrics ("ebs" gives
	// "ebs/csi"); a DNS label, unique among the groups. It may be empty only for a lone group.
	Name string
	// Taints selects the startup taints to remove. When empty, the group holds its driver's
	// conventional taint, "<driver name>/agent-not-ready", once its first gate that names a driver
	// (gates.DriverNamer, such as the CSI gate) has learned the name.
	Taints []startuptaint.TaintSpec
	// Gates hold the taints until every one passes. The reconciler probes those that check the
	// node itself (gates.Probed) every ProbeInterval, and checks the others, which read API
	// objects, at each reconcile; see package gates.
	Gates []gates.Gate
	// ConditionType, when set, publishes this group's verdict as a Node condition of this type,
	// written to the Node's status when it changes: a qualified name, not one of kubelet's
	// conditions.
	ConditionType string
}

// CSIDriverGroup is the group of one CSI driver with the defaults: its conventional taint, held
// until the driver answers Probe ready and kubelet has registered it in node's CSINode.
func CSIDriverGroup(node string, driver *gates.CSIGate) Group {
	return Group{Gates: []gates.Gate{driver, gates.NewCSINodeGate(node, driver, false)}}
}

// group is a Group at work: its gates' state and its episodes on the Node.
type group struct {
	Group
	// prober probes the probed gates; reconciled are the others, checked at each reconcile in this
	// order, and passing is when each of those started passing.
	prober     *prober
	reconciled []reconciledGate
	passing    passingSince
	state      nodeState
	// csiDriverRead is set once its driver's CSIDriver has been read (observe.go).
	csiDriverRead bool
	// metrics are the reconciler's.
	metrics *metrics.Metrics
}

// reconciledGate is a gate the reconcile checks itself (not a probed one), with the log of its
// verdicts.
type reconciledGate struct {
	gate gates.Gate
	log  gateLog
}

// Validate checks the reconciler's fields, and returns every problem with its field's path, such
// as groups[1].conditionType. Each taint must have one group whose gates decide it, so no two
// groups share a name, a taint key or a condition type.
func (r *NodeReconciler) Validate() field.ErrorList {
	var errs field.ErrorList
	if r.NodeName == "" {
		errs = append(errs, field.Required(field.NewPath("nodeName"), "the Node this agent looks after"))
	}
	if r.MaxWait < 0 {
		errs = append(errs, field.Invalid(field.NewPath("maxWait"), r.MaxWait.String(), "is negative"))
	}
	if r.RetaintAfter < 0 {
		errs = append(errs, field.Invalid(field.NewPath("retaintAfter"), r.RetaintAfter.String(), "is negative"))
	}
	if len(r.Groups) == 0 {
		errs = append(errs, field.Required(field.NewPath("groups"), "at least one group of taints and gates"))
	}
	if r.ConditionsOnly {
		if r.MaxWait > 0 {
			errs = append(errs, field.Forbidden(field.NewPath("maxWait"), "removes taints, which conditions-only mode never writes"))
		}
		if r.RetaintAfter > 0 {
			errs = append(errs, field.Forbidden(field.NewPath("retaintAfter"), "puts taints back, which conditions-only mode never writes"))
		}
	}
	names, keys, conditions := map[string]bool{}, map[string]string{}, map[string]string{}
	for i, g := range r.Groups {
		path := field.NewPath("groups").Index(i)
		errs = append(errs, r.validateGroup(g, path)...)
		switch {
		case (len(r.Groups) > 1 || g.Name != "") && len(validation.IsDNS1123Label(g.Name)) > 0:
			errs = append(errs, field.Invalid(path.Child("name"), g.Name,
				"is not a DNS label (it names the group in logs, events and metrics)"))
		case names[g.Name]:
			errs = append(errs, field.Duplicate(path.Child("name"), g.Name))
		}
		names[g.Name] = true
		if other, ok := conditions[g.ConditionType]; ok && g.ConditionType != "" {
			errs = append(errs, field.Invalid(path.Child("conditionType"), g.ConditionType, fmt.Sprintf("is group %s's", other)))
		}
		conditions[g.ConditionType] = g.Name
		for k, spec := range g.Taints {
			if other, ok := keys[spec.Key]; ok && other != g.Name {
				errs = append(errs, field.Forbidden(path.Child("taints").Index(k),
					fmt.Sprintf("%s is group %s's too; each taint has one group", spec.Key, other)))
			}
			keys[spec.Key] = g.Name
		}
	}
	return errs
}

// validateGroup checks one group's fields.
func (r *NodeReconciler) validateGroup(g Group, path *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(g.Gates) == 0 {
		errs = append(errs, field.Required(path.Child("gates"), "no readiness gate"))
	}
	for j, gate := range g.Gates {
		if gate == nil {
			errs = append(errs, field.Required(path.Child("gates").Index(j), "a nil gate"))
		} else if c, ok := gate.(*gates.NodeConditionGate); ok && g.ConditionType != "" && c.Requires(corev1.NodeConditionType(g.ConditionType)) {
			errs = append(errs, field.Forbidden(path.Child("gates").Index(j),
				g.ConditionType+" is the condition this group writes: it would wait for itself"))
		}
	}
	switch {
	case len(g.Taints) == 0 && r.RetaintAfter > 0:
		errs = append(errs, field.Required(path.Child("taints"),
			"required by continuous mode, which puts the first one's key back with effect NoSchedule"))
	case len(g.Taints) == 0 && !slices.ContainsFunc(g.Gates, isDriverNamer):
		errs = append(errs, field.Required(path.Child("taints"),
			"required when no gate names a driver whose conventional taint would be the default"))
	}
	if g.ConditionType == "" && r.ConditionsOnly {
		errs = append(errs, field.Required(path.Child("conditionType"), "required by conditions-only mode, which writes nothing else"))
	}
	if g.ConditionType != "" {
		if problem := conditionTypeProblem(g.ConditionType); problem != "" {
			errs = append(errs, field.Invalid(path.Child("conditionType"), g.ConditionType, problem))
		} else if r.DryRun {
			errs = append(errs, field.Forbidden(path.Child("conditionType"), "cannot be written with a dry run, which never writes to the Node"))
		}
	}
	return errs
}

func isDriverNamer(g gates.Gate) bool {
	_, ok := g.(gates.DriverNamer)
	return ok
}

// kubeletConditions are the Node conditions kubelet writes; the agent must not fight it over one.
var kubeletConditions = []corev1.NodeConditionType{corev1.NodeReady, corev1.NodeMemoryPressure,
	corev1.NodeDiskPressure, corev1.NodePIDPressure, corev1.NodeNetworkUnavailable}

// conditionTypeProblem says why t may not be the agent's Node condition type, or "": it must be a
// qualified name (as label keys are) that is not one of kubelet's own conditions.
func conditionTypeProblem(t string) string {
	if errs := validation.IsQualifiedName(t); len(errs) > 0 {
		return "is not a valid condition type: " + strings.Join(errs, "; ")
	}
	if slices.Contains(kubeletConditions, corev1.NodeConditionType(t)) {
		return "is a condition kubelet writes"
	}
	return ""
}

// buildGroup makes a group's prober and checks, once the reconciler's Clock is set.
func (r *NodeReconciler) buildGroup(cfg Group, interval time.Duration) *group {
	g := &group{Group: cfg, passing: passingSince{}, metrics: r.wired.metrics}
	var probed []gates.Probed
	for _, gate := range cfg.Gates {
		if p, ok := gate.(gates.Probed); ok {
			probed = append(probed, p)
		} else {
			g.reconciled = append(g.reconciled, reconciledGate{gate: gate})
		}
	}
	g.prober = newProber(probed, interval, r.NodeName, g.Name, r.wired.clock, r.wired.metrics)
	return g
}

// anyGroup reports whether has holds for any of the built groups.
func (r *NodeReconciler) anyGroup(has func(*group) bool) bool {
	return slices.ContainsFunc(r.running, has)
}
