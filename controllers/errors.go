// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"fmt"
	"regexp"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// What an error from the API server means: its class for metrics (failureClass), whether a retry
// can heal it (refused), and, for a refusal by the shipped admission policies, which rule refused
// and what an operator should check (RefusalTag, refusalAdvice).

// failureClass sorts a failed patch into a metrics.Result* class.
func failureClass(err error) string {
	switch {
	case apierrors.IsConflict(err):
		return metrics.ResultConflict
	case refused(err):
		return metrics.ResultForbidden
	}
	return metrics.ResultError
}

// refused tells a request the API server will not admit as it was sent, which no retry of the
// same request heals: RBAC and the policy's own checks answer Forbidden, while a validation that
// fails to evaluate (a policy rendered with the wrong settings) answers Invalid.
func refused(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsInvalid(err)
}

// refusalTag finds the tag that ends a policy's message: the last bracketed word of the API
// server's refusal, which quotes the message last.
var refusalTag = regexp.MustCompile(`\[([a-z][a-z-]*)\]`)

// RefusalTag returns the tag of the shipped policies' rule that refused err, or "" when err is no
// refusal of theirs.
func RefusalTag(err error) string {
	if err == nil || !refusedByPolicy(err) {
		return ""
	}
	m := refusalTag.FindAllStringSubmatch(err.Error(), -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

// policyName finds the policy in the API server's words for a refusal by a
// ValidatingAdmissionPolicy.
var policyName = regexp.MustCompile(`ValidatingAdmissionPolicy '([^']+)'`)

// changedList finds what a refusal of the metadata rule says the request changed: the agent changes
// no metadata but its removed record, so each of these was changed by another mutating admission
// step on the way (a MutatingAdmissionPolicy, a webhook, a policy engine's mutation).
var changedList = regexp.MustCompile(`\(changed: ([^)]*)\) \[`)

// refusalAdvice says what to check for a refused removal: the policy that refused it and the
// agent's setting it must agree with, another mutating admission step that changed the agent's
// request, or the agent's RBAC.
func refusalAdvice(refusal error) string {
	msg := refusal.Error()
	m := policyName.FindStringSubmatch(msg)
	if m == nil {
		return "the agent's RBAC: its ClusterRole must grant patch on nodes, bound to its pod's service account."
	}
	var setting string
	switch tag := RefusalTag(refusal); tag {
	case startuptaint.RefusalSettings:
		setting = "its settings, which the refusal quotes: each must be valid and the agent's own (--taint, --retaint-after, --condition-type)"
	case startuptaint.RefusalTaints, startuptaint.RefusalRemovedRecord, startuptaint.RefusalBootRecord:
		setting = "--taint (with --config, each group's taints): its taintList must list every taint the agent removes, " +
			"and its retaintAfter must be --retaint-after"
	case startuptaint.RefusalStatusOff, startuptaint.RefusalStatus, startuptaint.RefusalCondition, startuptaint.RefusalConditionsOnly:
		setting = "--condition-type and --conditions-only: its conditionType must name the same condition, in the same mode"
	case startuptaint.RefusalMetadata, startuptaint.RefusalSpec, startuptaint.RefusalNode,
		startuptaint.RefusalManagedEntries, startuptaint.RefusalManagedGained, startuptaint.RefusalManagedLost:
		changed := "the request"
		if c := changedList.FindStringSubmatch(msg); c != nil {
			changed = c[1]
		}
		return fmt.Sprintf("the mutating admission steps on Node updates (MutatingAdmissionPolicies, mutating webhooks, a policy "+
			"engine's mutations): the agent sends no such change, so one of them changed %s on the way, and the admission "+
			"policy %s refuses the result. Exclude the agent's service account from that mutation, or let it leave a "+
			"request's other fields alone (see the runbook, RemovalRefused).", changed, m[1])
	case startuptaint.RefusalManagedBound:
		return fmt.Sprintf("the Node's ownership records: the admission policy %s reads at most %d managedFields entries, "+
			"and this Node holds more, which only server-side apply managers add; an admin may clear them, as the refusal "+
			"says (see the runbook, RemovalRefused).", m[1], startuptaint.MaxManagedFieldsEntries)
	case startuptaint.RefusalUpdateOnly, startuptaint.RefusalNodeClaim, startuptaint.RefusalOwnNode:
		setting = "the agent's token: it must be a service-account token bound to its pod, on the Node it runs on (--node-name)"
	default:
		setting = untaggedSetting(msg)
	}
	return fmt.Sprintf("the admission policy %s and %s; the install renders both from params.yaml "+
		"(with kustomize v5.4.2 or later) or from the chart's values.", m[1], setting)
}

// failedVariable finds the variable a policy could not evaluate, which the API server names.
var failedVariable = regexp.MustCompile(`composited variable "([A-Za-z]+)" fails to evaluate`)

// untaggedSetting says which setting to check when the refusal carries no tag: a policy that could
// not evaluate one of its variables names it, and each variable reads one setting.
func untaggedSetting(msg string) string {
	v := failedVariable.FindStringSubmatch(msg)
	switch {
	case v == nil:
		return "every setting: the refusal carries no tag this agent knows, so the install and the agent may be of different releases"
	case strings.HasPrefix(v[1], "retaint"):
		return "--retaint-after: its retaintAfter must be the same duration"
	case strings.Contains(strings.ToLower(v[1]), "condition"):
		return "--condition-type: its conditionType must name the same condition"
	}
	return "--taint (with --config, each group's taints): its taintList must list every taint the agent removes"
}

// refusedByPolicy tells the shipped policies' refusal from RBAC's or another policy's.
func refusedByPolicy(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "ValidatingAdmissionPolicy") && strings.Contains(msg, startuptaint.PolicyMessagePrefix)
}
