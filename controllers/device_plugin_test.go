package controllers_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
)

// reconciles is how many reconciles the controllers named startup-taint have finished.
func reconciles() float64 {
	families, err := crmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "startup-taint" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

var _ = Describe("The allocatable resource gate (device plugins)", func() {
	It("holds the taint until kubelet's status update advertises the resource, and other status updates cause no reconcile", func(ctx SpecContext) {
		nodeName := uniqueNodeName()
		createNode(ctx, nodeName, startupTaint)
		gpus, err := controllers.ParseResourceRequirement("nvidia.com/gpu=2")
		Expect(err).NotTo(HaveOccurred())
		startManager(&controllers.NodeReconciler{NodeName: nodeName, RequireResources: []controllers.ResourceRequirement{gpus},
			Taints: []controllers.TaintSpec{{Key: startupTaint.Key}}})

		writeStatus := func(change func(*corev1.NodeStatus)) {
			GinkgoHelper()
			node := &corev1.Node{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: nodeName}, node)).To(Succeed())
			change(&node.Status)
			Expect(k8sClient.Status().Update(ctx, node)).To(Succeed())
		}
		holds := func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(hasTaintKey(startupTaint.Key)) }
		Eventually(func() float64 { return testutil.ToFloat64(metrics.GateReady.WithLabelValues("resource")) }).Should(Equal(0.0))
		Consistently(holds, "1s").WithContext(ctx).Should(Succeed())

		By("kubelet's status updates that leave the resource alone: no reconcile")
		before := reconciles()
		for i := range 5 {
			writeStatus(func(s *corev1.NodeStatus) {
				s.Allocatable = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), "nvidia.com/gpu": resource.MustParse("1")}
				s.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "Starting", Message: string(rune('a' + i))}}
			})
		}
		// The first of them changed the GPU count from none to 1: one reconcile, which still holds the taint.
		Consistently(holds, "1s").WithContext(ctx).Should(Succeed())
		Expect(reconciles() - before).To(Equal(1.0))

		By("the device plugin's second GPU, advertised through a status update")
		writeStatus(func(s *corev1.NodeStatus) { s.Allocatable["nvidia.com/gpu"] = resource.MustParse("2") })
		Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).NotTo(hasTaintKey(startupTaint.Key)) }).WithContext(ctx).Should(Succeed())
	})
})
