// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// Reporting the confinement check's verdicts: metrics, events on the Node and log lines, apart from
// the check itself, as events.go reports the reconciler's.

// report sets the gauge on every verdict and logs, and warns, only when the verdict changes.
func (c *ConfinementCheck) report(ctx context.Context, outcome string, node *corev1.Node) {
	c.metricsOf().Confined.Set(metrics.Bool(outcome == Confined))
	c.mu.Lock()
	c.verdict = outcome
	c.mu.Unlock()
	if outcome == c.last {
		return
	}
	c.last = outcome
	logger := log.FromContext(ctx)
	switch outcome {
	case Confined:
		logger.Info("the admission policy confines this agent to its own Node and startup taints")
		// Wakes the reconciler, whose writes waited for this verdict; it never blocks.
		select {
		case c.confined <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: c.nodeName()}}}:
		default:
		}
	case CannotWrite:
		logger.Info("this agent may not write its Node at all, so whether the admission policy confines it is unknown; checking again later")
	case NotConfined:
		// One sentence for the log and, capitalised, for the event.
		what := "no admission policy judges this agent"
		sentence := "No admission policy judges this agent (a dry-run change it must never make was admitted)"
		if c.belowMinimum() {
			what = fmt.Sprintf("the API server runs %s, older than Kubernetes 1.%d, the oldest minor this release supports",
				startuptaint.DescribeServer(c.Server), startuptaint.MinKubernetesMinor)
			sentence = "T" + what[1:]
		}
		if c.Require {
			logger.Error(nil, what+", and confinement is required: it removes nothing and writes nothing until "+c.notConfinedUntil())
			c.recorder().Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonNotConfined, "CheckConfinement",
				"%s, and confinement is required: it removes no startup taint and writes nothing until %s", sentence, c.notConfinedUntil())
			return
		}
		logger.Info(what + "; confinement is not required (--require-confinement=false), so this agent runs anyway")
		c.recorder().Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonNotConfined, "CheckConfinement",
			"%s, and it runs anyway (--require-confinement=false): it could change any Node its RBAC allows.", sentence)
	}
}

// notConfinedUntil says what ends a missing confinement: on an API server older than the
// minimum, an upgrade; otherwise the policy, installed.
func (c *ConfinementCheck) notConfinedUntil() string {
	if c.belowMinimum() {
		return fmt.Sprintf("the control plane runs Kubernetes 1.%d or later: upgrade it, then restart the agent's pods.",
			startuptaint.MinKubernetesMinor)
	}
	return "one does: install the own-node policy (config/policy, or the chart's admissionPolicy) and bind the agent's " +
		"ClusterRole to its service account."
}

// reportRemoval sets the gauge on every answer, and logs and records an event only when the
// answer changes: refused, refused for another reason, or admitted after a refusal.
func (c *ConfinementCheck) reportRemoval(ctx context.Context, node *corev1.Node, refusal error) {
	c.metricsOf().RemovalRefused.Set(metrics.Bool(refusal != nil))
	c.mu.Lock()
	wasRefused, wasAnswered := c.refusal != nil, c.answered
	same := wasAnswered && (refusal == nil && !wasRefused || refusal != nil && wasRefused && refusal.Error() == c.refusal.Error())
	c.answered, c.refusal = true, refusal
	c.mu.Unlock()
	if same {
		return
	}
	logger := log.FromContext(ctx)
	if refusal == nil {
		if wasRefused {
			logger.Info("the API server admits this agent's removal of its startup taints again; the agent is ready")
			c.recorder().Eventf(node, nil, corev1.EventTypeNormal, startuptaint.EventReasonRemovalAdmitted, "CheckRemoval",
				"The API server admits this agent's removal of its startup taints again (a dry run of its patch); the agent is ready")
		}
		return
	}
	advice := refusalAdvice(refusal)
	logger.Error(refusal, "the API server refuses this agent's removal of its startup taints; the agent is not ready until it is admitted",
		"check", advice)
	const format = "The API server refuses this agent's removal of its startup taints (a dry run of its patch), " +
		"so it is not ready: %s. Check %s"
	// A policy's refusal quotes its CEL expression over several lines; one line reads better.
	quoted := elide(strings.Join(strings.Fields(refusal.Error()), " "), maxNote-len(format)-len(advice))
	c.recorder().Eventf(node, nil, corev1.EventTypeWarning, startuptaint.EventReasonRemovalRefused, "CheckRemoval", format, quoted, advice)
}
