// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

// errNotProbed stands for the probed gates before their first probe has finished.
var errNotProbed = errors.New("not probed yet")

// gateError says which gate does not pass, in which reason class, and why.
type gateError struct {
	gate   string
	reason string // a gates.Reason* class
	err    error
	// title is the Node condition's reason while this gate holds the taint (gates.ConditionReason).
	title string
	// group is the name of the gate's group, when it has one.
	group string
	// recheck is when to check the gate again although no watch event came (gates.Rechecked).
	recheck time.Duration
}

// answer returns gate's answer err as a gateError, or nil when the gate passes.
func answer(gate gates.Gate, err error) *gateError {
	if err == nil {
		return nil
	}
	e := &gateError{gate: gate.Name(), reason: gates.Reason(err), err: err, title: gates.ConditionReason(gate)}
	if r, ok := gate.(gates.Rechecked); ok {
		e.recheck = r.Recheck()
	}
	return e
}

func (e *gateError) Error() string {
	if e.group != "" {
		return fmt.Sprintf("%s gate of group %s: %v", e.gate, e.group, e.err)
	}
	return fmt.Sprintf("%s gate: %v", e.gate, e.err)
}
func (e *gateError) Unwrap() error { return e.err }

// inGroup returns the error as group's; the gates share their results, so it is a copy.
func (e *gateError) inGroup(group string) *gateError {
	out := *e
	out.group = group
	return &out
}

// gateLabel is a gate's metric label: its name, after its group's when it has one ("efs/csi"),
// so two groups' CSI gates are two series and a lone group's are as they always were.
func gateLabel(group, gate string) string {
	if group == "" {
		return gate
	}
	return group + "/" + gate
}

// key identifies the state for deduplicating logs and events.
func (e *gateError) key() string { return e.gate + "/" + e.reason }

// gateLog logs a gate's result when it changes: when the gate starts or stops passing or its
// reason class changes, never for a repeated result, so a probe every second writes no lines.
type gateLog struct {
	known  bool
	reason string // "" while the gate passes
	// holders are the node agents the gate last named (gates.Holders), each a series of
	// startup_taint_gate_waiting_for.
	holders []string
}

// update records gerr (nil when the gate passes), logs it if it differs from the last result, and
// reports whether it did.
func (l *gateLog) update(logger logr.Logger, gate string, gerr *gateError) bool {
	reason := ""
	if gerr != nil {
		reason = gerr.reason
	}
	if l.known && reason == l.reason {
		logger.V(4).Info("readiness gate unchanged", "gate", gate, "ready", gerr == nil)
		return false
	}
	l.known, l.reason = true, reason
	if gerr == nil {
		logger.Info("readiness gate passes", "gate", gate)
	} else {
		logger.Info("readiness gate does not pass", "gate", gate, "reason", reason, "detail", gerr.err.Error())
	}
	return true
}

// report records the result of a gate of group that the reconcile checks itself: it logs a
// change (update) and sets the gate's metric, and returns gerr.
func (l *gateLog) report(ctx context.Context, m *metrics.Metrics, group, gate string, gerr *gateError) *gateError {
	l.update(log.FromContext(ctx), gate, gerr)
	label := gateLabel(group, gate)
	m.GateReady.WithLabelValues(label).Set(boolToFloat(gerr == nil))
	var holders []string
	if gerr != nil {
		holders = gates.Holders(gerr.err)
	}
	for _, h := range l.holders {
		if !slices.Contains(holders, h) {
			m.WaitingFor.DeleteLabelValues(label, h)
		}
	}
	for _, h := range holders {
		m.WaitingFor.WithLabelValues(label, h).Set(1)
	}
	l.holders = holders
	return gerr
}
