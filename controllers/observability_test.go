// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

var _ = Describe("Observability", func() {
	var nodeName string
	BeforeEach(func() { nodeName = uniqueNodeName() })

	It("follows the taint's lifecycle in metrics and events", func(ctx SpecContext) {
		// A taint key of this spec's own, so the global metrics carry only its series.
		taint := corev1.Taint{Key: "metrics.example.com/" + nodeName, Effect: corev1.TaintEffectNoExecute}
		key := taint.Key
		createNode(ctx, nodeName, taint)
		driver := startDriver(fakecsi.NotReady)
		group := controllers.CSIDriverGroup(nodeName, csiGate(driver.Path()))
		group.Taints = []startuptaint.TaintSpec{{Key: key}}
		startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{group}})

		By("holding the taint while the driver is not ready")
		Eventually(func() float64 { return testutil.ToFloat64(metrics.Default().Present.WithLabelValues(key)) }).Should(Equal(1.0))
		Eventually(func() float64 { return testutil.ToFloat64(metrics.Default().GateReady.WithLabelValues("csi")) }).Should(Equal(0.0))
		Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonWaitingForDriver))
		Expect(testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(key, metrics.ResultRemoved))).To(BeZero())

		By("removing it once the driver is ready and registered")
		observed := func(h prometheus.Histogram) uint64 {
			m := &dto.Metric{}
			Expect(h.Write(m)).To(Succeed())
			return m.GetHistogram().GetSampleCount()
		}
		firstRemovals, reactions := observed(metrics.Default().RemovalSeconds), observed(metrics.Default().ReadyToRemovedSeconds)
		driver.SetReadiness(fakecsi.Ready)
		registerDriver(ctx, nodeName, nil)
		Eventually(func() float64 { return testutil.ToFloat64(metrics.Default().Present.WithLabelValues(key)) }).Should(Equal(0.0))
		Expect(testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(key, metrics.ResultRemoved))).To(Equal(1.0))
		Expect(testutil.ToFloat64(metrics.Default().GateReady.WithLabelValues("csinode"))).To(Equal(1.0))
		Expect(testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(key))).To(BeZero())
		// Observed right after the counters move: wait for them.
		Eventually(func() uint64 { return observed(metrics.Default().RemovalSeconds) }).Should(Equal(firstRemovals+1), "the node's first removal is measured")
		Eventually(func() uint64 { return observed(metrics.Default().ReadyToRemovedSeconds) }).Should(Equal(reactions + 1))
		Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonTaintRemoved))

		By("counting a re-added taint once and removing it again")
		Consistently(func() float64 {
			return testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(key, metrics.ResultRemoved))
		}, time.Second).Should(Equal(1.0), "a removal is counted once")
		readdTaint(ctx, nodeName, taint)
		Eventually(func() float64 { return testutil.ToFloat64(metrics.Default().Readded.WithLabelValues(key)) }).Should(Equal(1.0))
		Eventually(func() float64 {
			return testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(key, metrics.ResultRemoved))
		}).Should(Equal(2.0))
		Expect(testutil.ToFloat64(metrics.Default().Present.WithLabelValues(key))).To(Equal(0.0))
		Eventually(func() uint64 { return observed(metrics.Default().ReadyToRemovedSeconds) }).Should(Equal(reactions + 2))
		Expect(observed(metrics.Default().RemovalSeconds)).To(Equal(firstRemovals+1), "only a node's first removal counts from its creation")
		Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonTaintRemovedAgain))

		By("exposing well-formed metrics")
		problems, err := testutil.CollectAndLint(metrics.Default().Present)
		Expect(err).NotTo(HaveOccurred())
		Expect(problems).To(BeEmpty())
		for _, c := range []string{"startup_taint_present", "startup_taint_removals_total", "startup_taint_readded_total",
			"startup_taint_removal_seconds", "startup_taint_ready_to_removed_seconds", "startup_taint_gate_ready",
			"startup_taint_probe_duration_seconds", "startup_taint_probe_errors_total"} {
			Expect(testutil.GatherAndCount(crmetrics.Registry, c)).To(BeNumerically(">", 0), c)
		}
		lint, err := testutil.GatherAndLint(crmetrics.Registry, "startup_taint_present", "startup_taint_removals_total",
			"startup_taint_readded_total", "startup_taint_removal_seconds", "startup_taint_ready_to_removed_seconds",
			"startup_taint_gate_ready", "startup_taint_probe_duration_seconds", "startup_taint_probe_errors_total")
		Expect(err).NotTo(HaveOccurred())
		Expect(lint).To(BeEmpty())
	})

	It("warns once about a Node that registered without its startup taint, and never about one whose taint was removed before", func(ctx SpecContext) {
		key := "missing.example.com/" + nodeName
		spec := []startuptaint.TaintSpec{{Key: key}}
		createNode(ctx, nodeName)
		startManager(&controllers.NodeReconciler{NodeName: nodeName,
			Groups: []controllers.Group{{Taints: spec, Gates: []gates.Gate{testkit.AlwaysReady{}}}}})
		warnings := func(g Gomega) int {
			return eventOccurrences(g, ctx, nodeName, startuptaint.EventReasonRegisteredWithoutTaint)
		}
		Eventually(warnings).Should(Equal(1))
		Expect(testutil.ToFloat64(metrics.Default().MissingAtRegistration.WithLabelValues(key))).To(Equal(1.0))
		By("later changes of the Node, and the taint coming and going, report nothing more")
		readdTaint(ctx, nodeName, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoExecute})
		Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonTaintRemoved))
		Consistently(warnings, time.Second).Should(Equal(1))

		By("a restarted agent on a Node whose taint an agent removed before")
		restarted := uniqueNodeName()
		node := createNode(ctx, restarted)
		Expect(testkit.UpdateNode(ctx, k8sClient, node.Name, func(n *corev1.Node) {
			n.Annotations = map[string]string{startuptaint.RemovedAnnotation: key}
		})).To(Succeed())
		startManager(&controllers.NodeReconciler{NodeName: restarted,
			Groups: []controllers.Group{{Taints: spec, Gates: []gates.Gate{testkit.AlwaysReady{}}}}})
		Consistently(func(g Gomega) int { return eventOccurrences(g, ctx, restarted, "") }, 2*time.Second).Should(BeZero())
	})

	It("closes an episode another writer ended: the taint's return is reported afresh", func(ctx SpecContext) {
		createNode(ctx, nodeName, startupTaint)
		registerDriver(ctx, nodeName, nil)
		driver := startDriver(fakecsi.NotReady)
		startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{controllers.CSIDriverGroup(nodeName, csiGate(driver.Path()))}})
		waits := func(g Gomega) int {
			return eventOccurrences(g, ctx, nodeName, startuptaint.EventReasonWaitingForDriver)
		}
		Eventually(waits).Should(Equal(1))
		present := metrics.Default().Present.WithLabelValues(startupTaint.Key)

		By("another writer removing the taint, and the agent seeing it gone")
		Expect(testkit.UpdateNode(ctx, k8sClient, nodeName, func(n *corev1.Node) {
			n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}})
		})).To(Succeed())
		Eventually(func() float64 { return testutil.ToFloat64(present) }).Should(BeZero())

		By("the taint coming back while the driver is still not ready")
		readdTaint(ctx, nodeName, startupTaint)
		Eventually(waits).Should(Equal(2))
	})

	// TestFlappingGateSendsOneEventPerReason checks the logic over 100 changes by calling Reconcile;
	// this spec checks it through the live manager, prober and events API.
	It("records a bounded number of events while a driver flaps 15 times", func(ctx SpecContext) {
		createNode(ctx, nodeName, startupTaint)
		driver := startDriver(fakecsi.NotReady)
		startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{controllers.CSIDriverGroup(nodeName, csiGate(driver.Path()))}})
		// Not registered in CSINode, so the taint is held through every flap: each flap changes
		// which gate holds it, and why.
		for range 15 {
			probes := driver.Probes()
			driver.SetReadiness(fakecsi.Ready)
			Eventually(driver.Probes).Should(BeNumerically(">", probes+1))
			probes = driver.Probes()
			driver.SetReadiness(fakecsi.NotReady)
			Eventually(driver.Probes).Should(BeNumerically(">", probes+1))
		}
		// The reconciler sends at most one WaitingForDriver per gate and reason class while the
		// taint is held (here csi/not_ready and csinode/not_registered), and the events API folds
		// repeats into a series: 30 gate changes leave at most 2 occurrences.
		Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonWaitingForDriver))
		Consistently(func(g Gomega) int { return eventOccurrences(g, ctx, nodeName, "") }).Should(BeNumerically("<=", 2))

		registerDriver(ctx, nodeName, nil)
		driver.SetReadiness(fakecsi.Ready)
		Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonTaintRemoved))
		Expect(eventOccurrences(Default, ctx, nodeName, "")).To(BeNumerically("<=", 3))
	})
})
