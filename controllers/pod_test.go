// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

var _ = Describe("The pod gate (another DaemonSet's agent)", func() {
	It("holds the taint until a matching pod on this node is Ready; other pods are not even cached", func(ctx SpecContext) {
		nodeName := uniqueNodeName()
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cni-"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		createNode(ctx, nodeName, startupTaint)
		cni, err := gates.ParsePodRequirement(ns.Name + "/k8s-app=cni-agent")
		Expect(err).NotTo(HaveOccurred())
		startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{{
			Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}}, Gates: []gates.Gate{gates.NewPodGate(nodeName, cni)},
		}}})
		pod := func(name, node, app string) *corev1.Pod {
			GinkgoHelper()
			p := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name, Labels: map[string]string{"k8s-app": app}},
				Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "agent", Image: "example.com/agent"}}},
			}
			Expect(k8sClient.Create(ctx, p)).To(Succeed())
			return p
		}
		setReady := func(p *corev1.Pod) {
			GinkgoHelper()
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(p), p)).To(Succeed())
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
			Expect(k8sClient.Status().Update(ctx, p)).To(Succeed())
		}
		holds := func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(hasTaintKey(startupTaint.Key)) }
		Consistently(holds, "1s").WithContext(ctx).Should(Succeed())

		By("the same agent on other nodes, and other pods on this one, all Ready: no reconcile, the taint stays")
		before := reconciles()
		for i := range 3 {
			setReady(pod(fmt.Sprintf("elsewhere-%d", i), uniqueNodeName(), "cni-agent"))
			setReady(pod(fmt.Sprintf("other-%d", i), nodeName, "kube-proxy"))
		}
		Consistently(holds, "1s").WithContext(ctx).Should(Succeed())
		Expect(reconciles() - before).To(Equal(0.0))

		By("this node's agent pod, not Ready yet")
		agent := pod("agent", nodeName, "cni-agent")
		Consistently(holds, "1s").WithContext(ctx).Should(Succeed())

		By("this node's agent pod Ready")
		setReady(agent)
		Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).NotTo(hasTaintKey(startupTaint.Key)) }).WithContext(ctx).Should(Succeed())
	})
})
