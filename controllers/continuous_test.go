// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
)

// nodeHistory records, from a watch of one Node, each change of whether it has a taint and of
// its condition's status, in the order the API server made them.
type nodeHistory struct {
	mu         sync.Mutex
	taint      []bool
	conditions []corev1.ConditionStatus
}

func (h *nodeHistory) record(node *corev1.Node, taint corev1.Taint, conditionType corev1.NodeConditionType) {
	h.mu.Lock()
	defer h.mu.Unlock()
	has := false
	for _, t := range node.Spec.Taints {
		has = has || t.MatchTaint(&taint)
	}
	if len(h.taint) == 0 || h.taint[len(h.taint)-1] != has {
		h.taint = append(h.taint, has)
	}
	for _, c := range node.Status.Conditions {
		if c.Type == conditionType && (len(h.conditions) == 0 || h.conditions[len(h.conditions)-1] != c.Status) {
			h.conditions = append(h.conditions, c.Status)
		}
	}
}

func (h *nodeHistory) taints() []bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bool(nil), h.taint...)
}

func (h *nodeHistory) statuses() []corev1.ConditionStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]corev1.ConditionStatus(nil), h.conditions...)
}

// watchNode records name's history until the spec ends.
func watchNode(ctx context.Context, name string, taint corev1.Taint, conditionType corev1.NodeConditionType) *nodeHistory {
	GinkgoHelper()
	cs, err := kubernetes.NewForConfig(cfg)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	Expect(err).NotTo(HaveOccurred())
	h := &nodeHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if node, ok := ev.Object.(*corev1.Node); ok {
				h.record(node, taint, conditionType)
			}
		}
	}()
	DeferCleanup(func() { cancel(); w.Stop(); <-done })
	return h
}

var _ = Describe("Continuous mode and the Node condition", func() {
	const conditionType = "ebs.csi.example.com/AgentReady"
	retaint := corev1.Taint{Key: startupTaint.Key, Effect: corev1.TaintEffectNoSchedule}

	It("puts the taint back with NoSchedule after the grace, holds it while the driver flaps, and writes the condition once per change",
		func(ctx SpecContext) {
			nodeName := uniqueNodeName()
			createNode(ctx, nodeName, startupTaint)
			history := watchNode(ctx, nodeName, retaint, conditionType)
			registerDriver(ctx, nodeName, nil)
			driver := startDriver(fakecsi.Ready)
			added := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseGate).Result))
			writes := func(status corev1.ConditionStatus) float64 {
				return testutil.ToFloat64(metrics.Default().ConditionWrites.WithLabelValues(string(status), metrics.ResultWritten))
			}
			trueWrites, falseWrites := writes(corev1.ConditionTrue), writes(corev1.ConditionFalse)
			group := controllers.CSIDriverGroup(nodeName, csiGate(driver.Path()))
			group.Taints = []startuptaint.TaintSpec{{Key: startupTaint.Key, Effect: startupTaint.Effect}}
			group.ConditionType = conditionType
			startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{group}, RetaintAfter: time.Second})
			Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(BeEmpty()) }).WithContext(ctx).Should(Succeed())

			By("the driver stopping: the taint goes back on with NoSchedule, never NoExecute")
			driver.SetReadiness(fakecsi.NotReady)
			Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(Equal([]corev1.Taint{retaint})) }).
				WithContext(ctx).Should(Succeed())
			Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonTaintAddedBack))

			By("the driver flapping faster than the hold time: the taint stays on")
			flapping, stop := make(chan struct{}), make(chan struct{})
			go func() {
				defer close(flapping)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(300 * time.Millisecond):
						driver.SetReadiness([]fakecsi.Readiness{fakecsi.Ready, fakecsi.NotReady}[i%2])
					}
				}
			}()
			Consistently(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(Equal([]corev1.Taint{retaint})) }, "3s").
				WithContext(ctx).Should(Succeed())
			close(stop)
			<-flapping

			By("the driver steady again: the taint comes off after the hold time")
			driver.SetReadiness(fakecsi.Ready)
			Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(BeEmpty()) }).WithContext(ctx).Should(Succeed())
			Consistently(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(BeEmpty()) }, "1500ms").WithContext(ctx).Should(Succeed())
			Expect(history.taints()).To(Equal([]bool{false, true, false}), "one re-taint, one removal")
			Expect(testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(retaint.ToString(), startuptaint.PutBackOf(startuptaint.CauseGate).Result)) - added).To(Equal(1.0))

			// The condition follows every change of the verdict, flapping included, with one write each.
			var statuses []corev1.ConditionStatus
			Eventually(func(g Gomega) {
				statuses = history.statuses()
				g.Expect(len(statuses)).To(BeNumerically(">=", 3))
				g.Expect(statuses[0]).To(Equal(corev1.ConditionTrue))
				g.Expect(statuses[1]).To(Equal(corev1.ConditionFalse))
				g.Expect(statuses[len(statuses)-1]).To(Equal(corev1.ConditionTrue))
			}).Should(Succeed())
			Expect(writes(corev1.ConditionTrue)+writes(corev1.ConditionFalse)-trueWrites-falseWrites).
				To(Equal(float64(len(statuses))), "one write per change the watch saw: %v", statuses)
		})
})
