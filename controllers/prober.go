package controllers

import (
	"context"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// gateStatus is the latest result of one local gate.
type gateStatus struct {
	name string
	err  error
}

// prober probes the local gates every interval and, whenever the combined readiness or the reason
// for waiting changes, sends an event that makes the controller reconcile the node at once.
type prober struct {
	gates    []Gate
	interval time.Duration
	node     string
	events   chan event.GenericEvent

	mu     sync.RWMutex
	status []gateStatus
	probed bool
}

func newProber(gates []Gate, interval time.Duration, node string) *prober {
	return &prober{
		gates:    gates,
		interval: interval,
		node:     node,
		// One pending event is enough: the reconcile it causes reads the latest status.
		events: make(chan event.GenericEvent, 1),
	}
}

// Start implements manager.Runnable.
func (p *prober) Start(ctx context.Context) error {
	ticker := time.NewTicker(p.interval)
	defer ticker.Stop()
	for {
		p.probeOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// NeedLeaderElection implements manager.LeaderElectionRunnable: every node probes its own agent.
func (p *prober) NeedLeaderElection() bool { return false }

func (p *prober) probeOnce(ctx context.Context) {
	logger := log.FromContext(ctx).WithValues("node", p.node)
	next := make([]gateStatus, len(p.gates))
	for i, g := range p.gates {
		next[i] = gateStatus{name: g.Name(), err: g.Probe(ctx)}
	}
	if ctx.Err() != nil {
		return
	}

	p.mu.Lock()
	prev, first := p.status, !p.probed
	p.status, p.probed = next, true
	p.mu.Unlock()

	changed := first
	for i, s := range next {
		var before error
		if !first {
			before = prev[i].err
		}
		switch {
		case s.err == nil && (first || before != nil):
			logger.Info("readiness gate passed", "gate", s.name)
			changed = true
		case s.err != nil && (first || before == nil || before.Error() != s.err.Error()):
			logger.Info("readiness gate not passing", "gate", s.name, "reason", s.err.Error())
			changed = true
		default:
			logger.V(4).Info("readiness gate unchanged", "gate", s.name, "ready", s.err == nil)
		}
	}
	if !changed {
		return
	}
	select {
	case p.events <- event.GenericEvent{Object: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: p.node}}}:
	default:
	}
}

// notReady returns the first gate that does not pass and why, or "" and nil when all pass.
// Before the first probe has finished, nothing is known, which counts as not ready.
func (p *prober) notReady() (string, error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if !p.probed {
		return "local", errNotProbed
	}
	for _, s := range p.status {
		if s.err != nil {
			return s.name, s.err
		}
	}
	return "", nil
}
