// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

func TestEveryPolicyRuleHasATagTheAgentKnows(t *testing.T) {
	known := []string{startuptaint.RefusalSettings, startuptaint.RefusalUpdateOnly, startuptaint.RefusalConditionsOnly, startuptaint.RefusalStatusOff, startuptaint.RefusalNodeClaim, startuptaint.RefusalOwnNode,
		startuptaint.RefusalTaints, startuptaint.RefusalSpec, startuptaint.RefusalMetadata, startuptaint.RefusalRemovedRecord, startuptaint.RefusalBootRecord, startuptaint.RefusalNode, startuptaint.RefusalStatus, startuptaint.RefusalCondition,
		startuptaint.RefusalManagedBound, startuptaint.RefusalManagedEntries, startuptaint.RefusalManagedGained, startuptaint.RefusalManagedLost,
		startuptaint.RefusalEventRegarding, startuptaint.RefusalEventReporter, startuptaint.RefusalEventMetadata, startuptaint.RefusalEventUpdate}
	refusals := policyRefusals(t)
	tags := make([]string, 0, len(refusals))
	for tag, refusal := range refusals {
		tags = append(tags, tag)
		if got := RefusalTag(refusal); got != tag {
			t.Errorf("RefusalTag() of the rule tagged %s = %q", tag, got)
		}
	}
	slices.Sort(tags)
	slices.Sort(known)
	if !slices.Equal(tags, known) {
		t.Errorf("the policies' tags are %v; the agent knows %v", tags, known)
	}
}

func TestRefusalAdviceNamesThePolicyAndTheSetting(t *testing.T) {
	refusals := policyRefusals(t)
	// What each rule of own-node-only, which judges the removal, sends an operator to check.
	want := map[string]string{
		startuptaint.RefusalSettings: "its settings, which the refusal quotes", startuptaint.RefusalTaints: "--taint", startuptaint.RefusalRemovedRecord: "--taint", startuptaint.RefusalBootRecord: "--taint",
		startuptaint.RefusalConditionsOnly: "--conditions-only", startuptaint.RefusalStatusOff: "--condition-type", startuptaint.RefusalStatus: "--condition-type",
		startuptaint.RefusalCondition: "--condition-type", startuptaint.RefusalUpdateOnly: "token", startuptaint.RefusalNodeClaim: "token", startuptaint.RefusalOwnNode: "token",
		startuptaint.RefusalSpec: "mutating admission", startuptaint.RefusalMetadata: "mutating admission", startuptaint.RefusalNode: "mutating admission",
		startuptaint.RefusalManagedBound: "managedFields", startuptaint.RefusalManagedEntries: "mutating admission", startuptaint.RefusalManagedGained: "mutating admission", startuptaint.RefusalManagedLost: "mutating admission",
	}
	for tag, refusal := range refusals {
		if strings.HasPrefix(tag, "event-") {
			continue // events are no removal
		}
		got := refusalAdvice(refusal)
		for _, w := range []string{"startup-taint-remover-own-node-only", want[tag]} {
			if w == "" || !strings.Contains(got, w) {
				t.Errorf("%s: refusalAdvice() = %q, want it to name %q", tag, got, w)
			}
		}
	}
	for name, tt := range map[string]struct{ denial, want string }{
		"a variable that fails":  {removalDenial.Error(), "--retaint-after"},
		"a condition variable":   {`ValidatingAdmissionPolicy 'p' with binding 'b' denied request: composited variable "ownConditions" fails to evaluate`, "--condition-type"},
		"RBAC":                   {`nodes "n1" is forbidden: User "system:serviceaccount:x:y" cannot patch resource "nodes"`, "ClusterRole"},
		"what another step adds": {policyDenial.Error(), "changed labels on the way"},
	} {
		if got := refusalAdvice(errors.New(tt.denial)); !strings.Contains(got, tt.want) {
			t.Errorf("%s: refusalAdvice() = %q, want it to name %q", name, got, tt.want)
		}
	}
}
