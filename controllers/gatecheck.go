// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

// The gates' verdict: the gates that read API objects are checked at each reconcile (checkGates),
// the probed ones (gates.Probed) by the group's prober on its own schedule; each gate's result is
// logged when it changes and kept in startup_taint_gate_ready (gateLog), and the verdict over time
// in the Node's state (judge).

// check checks the group's gates, and returns their verdict over time, as its state records it
// (nodeState.judge).
func (r *NodeReconciler) check(ctx context.Context, node *corev1.Node, g *group, found observed, now time.Time) verdict {
	notReady, readySince := g.checkGates(ctx, r.wired.client, r.wired.apiReader, node, now, found.bootedAgain)
	return g.state.judge(notReady, readySince, now)
}

// checkGates returns the group's first gate that does not pass, or nil and the time since when
// all pass. It evaluates every gate, so the gate metrics stay current; bootedAgain tells the
// probed gates that what a reboot leaves stale cannot count (gates.AfterReboot).
func (g *group) checkGates(ctx context.Context, reader, apiReader client.Reader, node *corev1.Node, now time.Time,
	bootedAgain bool) (*gateError, time.Time) {
	local, since := g.prober.notReady(bootedAgain)
	var first *gateError
	for i := range g.reconciled {
		c := &g.reconciled[i]
		in := gates.Input{Node: node, Reader: reader, APIReader: apiReader}
		gerr := c.log.report(ctx, g.metrics, g.Name, c.gate.Name(), answer(c.gate, c.gate.Check(ctx, in)))
		since = maxTime(since, g.passing.observe(i, gerr, now))
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

// verdict is the gates' verdict at one reconcile, with how long it has held.
type verdict struct {
	// notReady is the first gate that does not pass; nil when every gate passes.
	notReady *gateError
	// failingFor is how long a gate has not passed, passingFor how long every gate has; each is
	// zero while the other runs, and both before the first probe.
	failingFor, passingFor time.Duration
	// readyFrom is when every gate started passing, or when the held taint appeared if later:
	// what a removal's reaction time counts from.
	readyFrom time.Time
}

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
	m.GateReady.WithLabelValues(label).Set(metrics.Bool(gerr == nil))
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

// passingSince remembers, by the gate's index in its list, when each gate was first seen passing.
// The reaction time and the hold time count from when every gate passes, so each gate's start must
// be known, whatever its kind: a group keeps one for the gates its reconcile checks, and its prober
// one for the gates it probes on its own schedule.
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

// prober checks a group's probed gates (gates.Probed) every interval and, whenever a gate passes
// or stops passing or its reason class changes, sends an event that makes the controller reconcile
// the node at once.
type prober struct {
	gates    []gates.Probed
	interval time.Duration
	node     string
	group    string // the gates' group's name, for logs and metric labels
	clock    clock.WithTicker
	metrics  *metrics.Metrics
	events   chan event.GenericEvent
	kick     chan struct{}
	logs     []gateLog // parallel to gates; only the probing goroutine touches them

	mu      sync.RWMutex
	status  []*gateError // nil where the gate passes; parallel to gates
	probed  bool
	passing passingSince
}

func newProber(probed []gates.Probed, interval time.Duration, node, group string, clk clock.WithTicker, m *metrics.Metrics) *prober {
	return &prober{
		metrics:  m,
		gates:    probed,
		interval: interval,
		node:     node,
		group:    group,
		clock:    clk,
		// One pending event is enough: the reconcile it causes reads the latest status.
		events:  make(chan event.GenericEvent, 1),
		kick:    make(chan struct{}, 1),
		logs:    make([]gateLog, len(probed)),
		passing: passingSince{},
	}
}

// Start implements manager.Runnable.
func (p *prober) Start(ctx context.Context) error {
	for _, g := range p.gates {
		if w, ok := g.(gates.Watcher); ok {
			go func() {
				if err := w.Watch(ctx, p.probeNow); err != nil {
					// Not fatal: the interval still probes the gate.
					log.FromContext(ctx).Error(err, "cannot watch the gate; probing it every interval", "gate", g.Name())
				}
			}()
		}
	}
	ticker := p.clock.NewTicker(p.interval)
	defer ticker.Stop()
	for {
		p.probeOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		case <-p.kick:
		}
	}
}

// probeNow asks for a probe at once instead of at the next tick; it never blocks, and kicks that
// arrive while one is pending make one probe.
func (p *prober) probeNow() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every node probes its own agent.
func (p *prober) NeedLeaderElection() bool { return false }

func (p *prober) probeOnce(ctx context.Context) {
	logger := log.FromContext(ctx).WithValues("node", p.node)
	if p.group != "" {
		logger = logger.WithValues("group", p.group)
	}
	next := make([]*gateError, len(p.gates))
	for i, g := range p.gates {
		start := p.clock.Now()
		err := p.probeGate(ctx, g)
		if ctx.Err() != nil {
			return // shutting down: a cancelled probe says nothing about the agent
		}
		label := gateLabel(p.group, g.Name())
		p.metrics.ProbeDuration.WithLabelValues(label).Observe(p.clock.Since(start).Seconds())
		next[i] = answer(g, err)
		if next[i] != nil {
			p.metrics.ProbeErrors.WithLabelValues(label, next[i].reason).Inc()
		}
		p.metrics.GateReady.WithLabelValues(label).Set(metrics.Bool(next[i] == nil))
	}

	p.mu.Lock()
	p.status, p.probed = next, true
	now := p.clock.Now()
	for i, s := range next {
		p.passing.observe(i, s, now)
	}
	p.mu.Unlock()

	changed := false
	for i, s := range next {
		changed = p.logs[i].update(logger, p.gates[i].Name(), s) || changed
	}
	if !changed {
		return
	}
	select {
	case p.events <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.node}}}:
	default:
	}
}

// probeGate runs one check of g, within the gate's timeout; a check the timeout cancels counts as
// gates.ReasonTimeout whatever the gate made of it.
func (p *prober) probeGate(ctx context.Context, g gates.Probed) error {
	timeout := g.Timeout()
	if timeout <= 0 {
		return g.Check(ctx, gates.Input{})
	}
	checkCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := g.Check(checkCtx, gates.Input{})
	if err != nil && ctx.Err() == nil && errors.Is(checkCtx.Err(), context.DeadlineExceeded) {
		return gates.NotReady(gates.ReasonTimeout, fmt.Errorf("no answer within %s: %w", timeout, err))
	}
	return err
}

// notReady returns the first probed gate that does not pass, or nil and the time since when all
// have passed. Before the first probe has finished nothing is known, which counts as not ready.
// Gates heeded only after a reboot (gates.AfterReboot) count only when rebooted.
func (p *prober) notReady(rebooted bool) (*gateError, time.Time) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.probed {
		return &gateError{gate: "local", reason: gates.ReasonNotProbed, err: errNotProbed}, time.Time{}
	}
	var since time.Time
	for i, s := range p.status {
		if _, after := p.gates[i].(gates.AfterReboot); after && !rebooted {
			continue
		}
		if s != nil {
			return s, time.Time{}
		}
		since = maxTime(since, p.passing[i])
	}
	return nil, since
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
