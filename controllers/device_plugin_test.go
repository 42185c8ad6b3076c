// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

var _ = Describe("The allocatable resource gate (device plugins)", func() {
	It("holds the taint until kubelet's status update advertises the resource, and other status updates cause no reconcile", func(ctx SpecContext) {
		nodeName := uniqueNodeName()
		createNode(ctx, nodeName, startupTaint)
		gpus, err := gates.ParseResourceRequirement("nvidia.com/gpu=2")
		Expect(err).NotTo(HaveOccurred())
		startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{{
			Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}}, Gates: []gates.Gate{gates.NewResourceGate(gpus)},
		}}})

		writeStatus := func(change func(*corev1.NodeStatus)) {
			GinkgoHelper()
			node := &corev1.Node{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: nodeName}, node)).To(Succeed())
			change(&node.Status)
			Expect(k8sClient.Status().Update(ctx, node)).To(Succeed())
		}
		holds := func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(hasTaintKey(startupTaint.Key)) }
		Eventually(func() float64 { return testutil.ToFloat64(metrics.Default().GateReady.WithLabelValues("resource")) }).Should(Equal(0.0))
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

var _ = Describe("The ResourceSlice gate (DRA drivers)", Label(testkit.EveryMinor), func() {
	if !testkit.ServesMinor(startuptaint.ResourceSliceMinor) {
		return // below, the binary refuses the gate (cmd/server.go)
	}
	It("holds the taint until the driver publishes a device for this node; other nodes' and other drivers' slices do not count",
		func(ctx SpecContext) {
			const driver = "gpu.example.com"
			nodeName := uniqueNodeName()
			createNode(ctx, nodeName, startupTaint)
			startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{{
				Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}}, Gates: []gates.Gate{gates.NewResourceSliceGate(nodeName, driver)},
			}}})
			slice := func(name, driver, node string, devices int) *resourcev1.ResourceSlice {
				s := &resourcev1.ResourceSlice{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec: resourcev1.ResourceSliceSpec{Driver: driver, NodeName: ptr.To(node),
						Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}},
				}
				for i := range devices {
					s.Spec.Devices = append(s.Spec.Devices, resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i)})
				}
				Expect(k8sClient.Create(ctx, s)).To(Succeed())
				DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, s))).To(Succeed()) })
				return s
			}
			holds := func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(hasTaintKey(startupTaint.Key)) }

			slice(nodeName+"-elsewhere", driver, nodeName+"-other", 2)
			slice(nodeName+"-nic", "nic.example.com", nodeName, 2)
			own := slice(nodeName+"-gpu", driver, nodeName, 0)
			Eventually(func() float64 {
				return testutil.ToFloat64(metrics.Default().GateReady.WithLabelValues("resourceslice"))
			}).Should(Equal(0.0))
			Consistently(holds, "1s").WithContext(ctx).Should(Succeed())

			By("the driver publishing its first device for this node")
			own.Spec.Devices = []resourcev1.Device{{Name: "gpu-0"}}
			Expect(k8sClient.Update(ctx, own)).To(Succeed())
			Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).NotTo(hasTaintKey(startupTaint.Key)) }).WithContext(ctx).Should(Succeed())
		})
})
