// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

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
		err := p.check(ctx, g)
		if ctx.Err() != nil {
			return // shutting down: a cancelled probe says nothing about the agent
		}
		label := gateLabel(p.group, g.Name())
		p.metrics.ProbeDuration.WithLabelValues(label).Observe(p.clock.Since(start).Seconds())
		next[i] = answer(g, err)
		if next[i] != nil {
			p.metrics.ProbeErrors.WithLabelValues(label, next[i].reason).Inc()
		}
		p.metrics.GateReady.WithLabelValues(label).Set(boolToFloat(next[i] == nil))
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

// check runs one check of g, within the gate's timeout; a check the timeout cancels counts as
// gates.ReasonTimeout whatever the gate made of it.
func (p *prober) check(ctx context.Context, g gates.Probed) error {
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
