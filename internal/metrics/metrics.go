// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package metrics defines the controller's Prometheus metrics. Each reconciler registers its own
// (For), by default into controller-runtime's registry, which the manager's metrics server serves. None is labelled with
// the node's name: every pod is its own scrape target, and the target's labels say which node.
package metrics

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Results of a removal attempt, the values of the result label. A taint put back counts as its
// cause's (startuptaint.PutBacks).
const (
	ResultRemoved   = "removed"
	ResultConflict  = "conflict"
	ResultForbidden = "forbidden"
	ResultError     = "error"
	// ResultDryRun counts, once per episode, a removal that --dry-run did not make.
	ResultDryRun = "dry_run"
	// ResultWritten counts a Node condition written (--condition-type).
	ResultWritten = "written"
)

// Label names shared by several metrics.
const (
	labelTaint  = "taint"
	labelGate   = "gate"
	labelResult = "result"
)

// version is set at build time with -ldflags -X.
var version = "dev"

// Version is the build's version, as stamped at build time ("dev" when it was not).
func Version() string { return version }

// Metrics are one reconciler's collectors. A NodeReconciler registers its own into the
// prometheus.Registerer it is given (For), so a driver that embeds two can tell their series apart.
type Metrics struct {
	// Present is 1 while the configured taint is on the node.
	Present *prometheus.GaugeVec
	// Removals counts removal attempts by result.
	Removals *prometheus.CounterVec
	// Readded counts taints that came back after this pod had removed them.
	Readded *prometheus.CounterVec
	// RemovalSeconds is the time from the Node's creation to the first removal of its taints.
	RemovalSeconds prometheus.Histogram
	// ReadyToRemovedSeconds is the controller's own reaction time.
	ReadyToRemovedSeconds prometheus.Histogram
	// GateReady is 1 while a readiness gate passes.
	GateReady *prometheus.GaugeVec
	// WaitingFor is 1 for each node agent a gate names as keeping it from passing.
	WaitingFor *prometheus.GaugeVec
	// ProbeDuration is how long each local probe took.
	ProbeDuration *prometheus.HistogramVec
	// ProbeErrors counts failed probes by gate and reason class.
	ProbeErrors *prometheus.CounterVec
	// ForcedRemovals counts removals that the maximum wait forced while a gate did not pass.
	ForcedRemovals *prometheus.CounterVec
	// Retaints counts the startup taints continuous mode put back on the Node, by result.
	Retaints *prometheus.CounterVec
	// ConditionWrites counts writes of the Node condition (--condition-type), by the status written.
	ConditionWrites *prometheus.CounterVec
	// Confined is 1 while the admission policy is known to confine this agent.
	Confined prometheus.Gauge
	// RemovalRefused is 1 while the API server refuses this agent's dry-run removal of its startup
	// taints.
	RemovalRefused prometheus.Gauge
	// MissingAtRegistration is 1 when the agent's Node registered without the startup taint.
	MissingAtRegistration *prometheus.GaugeVec
	// CSIDriverPreventsScheduling is 1 when the driver's CSIDriver sets preventPodSchedulingIfMissing.
	CSIDriverPreventsScheduling *prometheus.GaugeVec
	// UntoleratedPods is how many pending pods in the node agents' namespaces the startup taint's
	// group keeps away from this node, for want of a toleration.
	UntoleratedPods *prometheus.GaugeVec
}

// New makes the collectors and registers each into reg. A collector reg already holds (another
// reconciler's, on the same registry) is shared rather than refused, as one process's series are.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	m.Present = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "startup_taint_present",
		Help: "1 while the configured startup taint is on this node, 0 once it is gone.",
	}, []string{labelTaint}))
	m.Removals = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "startup_taint_removals_total",
		Help: "Attempts to remove a startup taint, by result (removed, conflict, forbidden, error, dry_run).",
	}, []string{labelTaint, labelResult}))
	m.Readded = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "startup_taint_readded_total",
		Help: "Times a startup taint came back after this pod had removed it.",
	}, []string{labelTaint}))
	m.RemovalSeconds = register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "startup_taint_removal_seconds",
		Help:    "Seconds from the Node's creation to the first removal of its startup taints.",
		Buckets: []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800},
	}))
	m.ReadyToRemovedSeconds = register(reg, prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "startup_taint_ready_to_removed_seconds",
		Help:    "Seconds from all readiness gates passing (or the taint appearing, if later) to the patch being accepted.",
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
	}))
	m.GateReady = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "startup_taint_gate_ready",
		Help: "1 while the readiness gate the label names passes, 0 while it does not.",
	}, []string{labelGate}))
	m.WaitingFor = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "startup_taint_gate_waiting_for",
		Help: "1 for each node agent the gate names as keeping it from passing now (--node-agents: a DaemonSet, NAMESPACE/NAME); " +
			"the series goes once it no longer does. Bounded by the cluster's DaemonSets, never a pod.",
	}, []string{labelGate, "agent"}))
	m.ProbeDuration = register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "startup_taint_probe_duration_seconds",
		Help:    "Seconds one probe of a local readiness gate took.",
		Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5},
	}, []string{labelGate}))
	m.ProbeErrors = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "startup_taint_probe_errors_total",
		Help: "Failed probes of a local readiness gate, by reason class.",
	}, []string{labelGate, "reason"}))
	m.ForcedRemovals = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "startup_taint_forced_removals_total",
		Help: "Startup taints removed after the maximum wait (--max-wait) although a readiness gate did not pass.",
	}, []string{labelTaint}))
	m.Retaints = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "startup_taint_retaints_total",
		Help: "Attempts to put a startup taint back: after a readiness gate stopped passing (--retaint-after), after a reboot, " +
			"while the node shuts down or while it is cordoned, by result (added, added_after_reboot, added_at_shutdown, added_at_cordon, " +
			"conflict, forbidden, error, dry_run).",
	}, []string{labelTaint, labelResult}))
	m.ConditionWrites = register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "startup_taint_condition_writes_total",
		Help: "Writes of the agent's Node condition (--condition-type), one per change, " +
			"by status (True, False) and result (written, forbidden, error).",
	}, []string{"status", labelResult}))
	m.Confined = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "startup_taint_confined",
		Help: "1 when the admission policy refused this agent's dry-run change of its own Node's labels; " +
			"0 when it was admitted or could not be tried.",
	}))
	m.RemovalRefused = register(reg, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "startup_taint_removal_refused",
		Help: "1 while the API server refuses this agent's dry-run removal of its own startup taints, which also makes it not ready; " +
			"0 once admitted, and before the first answer.",
	}))
	m.MissingAtRegistration = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "startup_taint_missing_at_registration",
		Help: "1 when this agent first saw its Node, minutes after its creation, without the startup taint and with no record " +
			"of its removal: the node registered without it, and pods could be scheduled there before the agent was ready.",
	}, []string{labelTaint}))
	m.CSIDriverPreventsScheduling = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "startup_taint_csi_driver_prevents_scheduling",
		Help: "1 when the CSIDriver of the driver this agent serves sets preventPodSchedulingIfMissing, so that the scheduler " +
			"itself keeps pods with its PVC-backed volumes off the node until CSINode lists it; 0 when it does not, or there is none.",
	}, []string{"driver"}))
	m.UntoleratedPods = register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "startup_taint_untolerated_pods",
		Help: "Pending pods in the node agents' namespaces, found unschedulable, that could run on this node but for a startup " +
			"taint of this taint's group, which they do not tolerate: while the gates have held the taints for a minute, looked " +
			"for once a minute; 0 otherwise. A node agent that needs one never becomes ready on a node pool that carries the taint.",
	}, []string{labelTaint}))
	return m
}

// register registers c into reg and returns it, or the equal collector reg already holds.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if existing, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
			if held, ok := existing.ExistingCollector.(C); ok {
				return held
			}
		}
		panic(fmt.Sprintf("registering a startup_taint_ metric: %v", err))
	}
	return c
}

var (
	defaultOnce    sync.Once
	defaultMetrics *Metrics
)

// For returns the metrics registered into reg, or, when reg is nil, the process's: those in
// controller-runtime's registry, which the manager's metrics server serves.
func For(reg prometheus.Registerer) *Metrics {
	if reg != nil {
		return New(reg)
	}
	defaultOnce.Do(func() { defaultMetrics = New(crmetrics.Registry) })
	return defaultMetrics
}

// Default is For(nil): the process's metrics in controller-runtime's registry.
func Default() *Metrics { return For(nil) }

// RegisterBuildInfo registers the build's version, revision and Go version into reg, as the
// labels of startup_taint_build_info; the binary calls it once.
func RegisterBuildInfo(reg prometheus.Registerer) {
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "startup_taint_build_info",
		Help: "Always 1; the labels describe the running build.",
	}, []string{"version", "revision", "go_version"})
	info = register(reg, info)
	info.WithLabelValues(version, revision(), runtime.Version()).Set(1)
}

// revision is the VCS revision the go command stamped into the binary, if any.
func revision() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return "unknown"
}

// Bool is a gauge's value for b: 1 when true.
func Bool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
