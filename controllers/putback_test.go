// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/expectations"
)

func TestEveryPutBackCauseHasOneRuleAndWordsOfItsOwn(t *testing.T) {
	if len(putBackRules) != len(startuptaint.PutBacks) {
		t.Errorf("%d rules for %d causes", len(putBackRules), len(startuptaint.PutBacks))
	}
	seen := map[string]startuptaint.Cause{}
	for _, row := range startuptaint.PutBacks {
		rule := ruleOf(row.Cause)
		if rule.when == 0 || rule.holds == nil || rule.tell == nil {
			t.Errorf("cause %s: its rule is never tried, or cannot say why", row.Cause)
		}
		for _, word := range []string{"action " + row.Action, "result " + row.Result, "state " + row.State, "why " + row.Why} {
			if other, ok := seen[word]; ok {
				t.Errorf("causes %s and %s share the %s", other, row.Cause, word)
			}
			seen[word] = row.Cause
		}
	}
}

func TestADryRunSaysWhyItWouldPutTheTaintBackWhateverTheCause(t *testing.T) {
	node := testNode("uid-p1", foreign)
	node.Status.NodeInfo.BootID = "boot-1"
	node.Spec.Unschedulable = true
	node.Annotations = map[string]string{startuptaint.BootAnnotation: startup.Key + "=boot-1",
		startuptaint.RemovedAnnotation: startup.Key}
	e := newEpisodeTest(t, node)
	e.set(func(r *NodeReconciler) { r.DryRun = true })
	e.ready(true)
	e.reconcile()
	expectEvents(t, e.events(), "Normal WouldAddTaint Dry run: would put startup taint example.com/agent-not-ready:NoSchedule back now: "+
		"the node is cordoned")
	if got := e.taints(); !expectations.EqualTaints(got, []corev1.Taint{foreign}) {
		t.Fatalf("taints %v after a dry run, want %v as they were", got, foreign)
	}
}
