// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// What the confinement check takes from the reconciler it is wired to, unless its own fields say.

// inherited is what a ConfinementCheck takes from the reconciler it serves.
type inherited struct {
	client     client.Client
	nodeName   string
	recorder   events.EventRecorder
	clock      clock.Clock
	taints     func() []startuptaint.TaintSpec
	conditions []string
	metrics    *metrics.Metrics
}

// metricsOf is the metrics of the reconciler the check serves, or the process's.
func (c *ConfinementCheck) metricsOf() *metrics.Metrics {
	if c.inherited.metrics == nil {
		return metrics.Default()
	}
	return c.inherited.metrics
}

// client is c.Client, or the reconciler's.
func (c *ConfinementCheck) client() client.Client {
	if c.Client == nil {
		return c.inherited.client
	}
	return c.Client
}

// nodeName is c.NodeName, or the reconciler's.
func (c *ConfinementCheck) nodeName() string {
	if c.NodeName == "" {
		return c.inherited.nodeName
	}
	return c.NodeName
}

// recorder is c.Recorder, or the reconciler's.
func (c *ConfinementCheck) recorder() events.EventRecorder {
	if c.Recorder == nil {
		return c.inherited.recorder
	}
	return c.Recorder
}

// taints is c.Taints, or the reconciler's.
func (c *ConfinementCheck) taints() func() []startuptaint.TaintSpec {
	if c.Taints == nil {
		return c.inherited.taints
	}
	return c.Taints
}

// conditions is c.Conditions, or, in conditions-only mode, the reconciler's condition types.
func (c *ConfinementCheck) conditions() []string {
	if c.Conditions == nil {
		return c.inherited.conditions
	}
	return c.Conditions
}

// clock is c.Clock, or the reconciler's, or the real clock.
func (c *ConfinementCheck) clock() clock.Clock {
	switch {
	case c.Clock != nil:
		return c.Clock
	case c.inherited.clock != nil:
		return c.inherited.clock
	}
	return clock.RealClock{}
}
