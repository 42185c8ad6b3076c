// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
)

// The gates' verdict as a Node condition (ConditionType): visible in `kubectl describe node`, and
// readable by controllers that act on Node conditions.

// ConditionReasonGatesPass is the condition's reason while every gate passes. While one does not,
// the reason names that gate (gates.ConditionReason): CSINotReady, CSINodeNotReady, HTTPNotReady,
// ContainerNotReady, FileNotReady, ResourceNotReady, ResourceSliceNotReady, NodeConditionNotReady,
// PodNotReady.
const ConditionReasonGatesPass = "GatesPass"

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

// publishCondition writes the group's verdict as its ConditionType condition when it differs from
// the condition on the Node and from the one this process wrote last. Nothing is written before
// the gates have been probed, so a restarted agent does not report False for a moment.
func (r *NodeReconciler) publishCondition(ctx context.Context, node *corev1.Node, p *plan) error {
	g, notReady := p.g, p.notReady
	if g.ConditionType == "" || r.DryRun || notReady != nil && notReady.reason == gates.ReasonNotProbed {
		return nil
	}
	want := condition(g.ConditionType, notReady)
	current := gates.FindCondition(node.Status.Conditions, want.Type)
	if sameCondition(current, &want) || g.state.conditionWritten(&want) {
		return nil
	}
	want = stamped(want, current, p.now)
	err := writeCondition(ctx, r.wired.client, node, want)
	if apierrors.IsNotFound(err) {
		return nil // the Node was deleted meanwhile
	}
	r.reportCondition(ctx, want, err)
	if err != nil {
		return fmt.Errorf("writing condition %s of node %s: %w", want.Type, node.Name, err)
	}
	g.state.recordCondition(&want)
	return nil
}

// condition is the verdict as a condition of type t, without its times.
func condition(t string, notReady *gateError) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeConditionType(t)}
	if notReady == nil {
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ConditionReasonGatesPass, "Every readiness gate passes"
		return c
	}
	// The message names the reason class, not the error's detail, so a detail that changes at
	// every probe does not cause a write.
	c.Status, c.Reason = corev1.ConditionFalse, notReady.title
	msg := fmt.Sprintf("The %s gate does not pass: %s", notReady.gate, strings.ReplaceAll(notReady.reason, "_", " "))
	c.Message = elide(msg, maxConditionMessage)
	return c
}

// stamped is want as written at now over current, the Node's condition of its type (nil when
// there is none): the transition time moves only with the status.
func stamped(want corev1.NodeCondition, current *corev1.NodeCondition, now time.Time) corev1.NodeCondition {
	want.LastHeartbeatTime, want.LastTransitionTime = metav1.NewTime(now), metav1.NewTime(now)
	if current != nil && current.Status == want.Status {
		want.LastTransitionTime = current.LastTransitionTime
	}
	return want
}

// maxConditionMessage is the longest message the admission policy admits in the agent's condition.
const maxConditionMessage = 1024

// sameCondition compares what the verdict decides: the status, reason and message.
func sameCondition(a, b *corev1.NodeCondition) bool {
	return a != nil && b != nil && a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}
