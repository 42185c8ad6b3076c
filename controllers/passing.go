// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import "time"

// passingSince remembers, by the gate's index in its list, when each gate was first seen passing. The reaction time and
// the hold time count from when every gate passes, so each gate's start must be known, whatever
// its kind: a group keeps one for the gates its reconcile checks, and its prober one for the gates
// it probes on its own schedule.
type passingSince map[int]time.Time

// observe records gate's verdict at now and returns since when the gate has passed: now, if it has
// just started, or zero while it does not pass.
func (p passingSince) observe(gate int, notReady *gateError, now time.Time) time.Time {
	if notReady != nil {
		delete(p, gate)
		return time.Time{}
	}
	if _, ok := p[gate]; !ok {
		p[gate] = now
	}
	return p[gate]
}
