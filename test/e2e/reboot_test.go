// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// The hollow kubelet has neither a boot ID (kubemark's fake cAdvisor reports none) nor a graceful
// shutdown, so these specs write the Node's status as kubelet does: its boot ID as the node status
// setter copies it from the host at every start (pkg/kubelet/nodestatus), and its Ready condition
// as the shutdown manager makes it (pkg/kubelet/nodeshutdown), before signalling the agent.
var _ = Describe("the binary across a node's reboots", func() {
	putBack := corev1.Taint{Key: startupTaint.Key, Effect: corev1.TaintEffectNoSchedule}
	const name = "e2e-reboot"
	writeStatus := func(ctx context.Context, change func(*corev1.Node)) {
		GinkgoHelper()
		Expect(testkit.PatchNodeStatus(ctx, k8sClient, name, change)).To(Succeed())
	}
	boot := func(id string) func(*corev1.Node) { return func(n *corev1.Node) { n.Status.NodeInfo.BootID = id } }
	ready := func(status corev1.ConditionStatus, message string) func(*corev1.Node) {
		return func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, Reason: "KubeletNotReady", Message: message}}
		}
	}
	taints := func(ctx context.Context) func(Gomega) []corev1.Taint {
		return func(g Gomega) []corev1.Taint {
			node := &corev1.Node{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
			return startuptaint.WithoutTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: corev1.TaintNodeNotReady}})
		}
	}
	// With --taint, as every install renders it: without it, a CSI group's taint is known only
	// once its driver has told its name, which after a reboot is too late.
	start := func(socket string) *gexec.Session {
		return runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+name, "--csi-address="+socket,
			"--taint="+startupTaint.Key+":"+string(startupTaint.Effect),
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms")
	}
	stop := func(s *gexec.Session) {
		GinkgoHelper()
		s.Signal(syscall.SIGTERM)
		Eventually(s, 10*time.Second).Should(gexec.Exit(0))
	}

	It("leaves the Node alone on a restart in the same boot, puts the taint back after a reboot and as kubelet shuts the node down", func(ctx SpecContext) {
		driver := setupNode(ctx, name, startupTaint)
		writeStatus(ctx, boot("boot-1"))
		agent := start(driver.Path())
		Eventually(taints(ctx)).Should(BeEmpty())
		node := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		Expect(node.Annotations).To(HaveKeyWithValue(startuptaint.BootAnnotation, startupTaint.Key+"=boot-1"))

		By("a rollout of the agent while its driver restarts, in the same boot")
		writeStatus(ctx, ready(corev1.ConditionTrue, "kubelet is posting ready status"))
		stop(agent)
		driver.Stop()
		agent = start(driver.Path())
		Consistently(taints(ctx), "2s").Should(BeEmpty(), "a restart is no reboot")
		Expect(driver.Restart()).To(Succeed())

		By("a reboot without a graceful shutdown: the agent starts before its driver")
		stop(agent)
		driver.Stop()
		writeStatus(ctx, boot("boot-2"))
		agent = start(driver.Path())
		Eventually(taints(ctx)).Should(ConsistOf(putBack))
		Eventually(func(g Gomega) int { return eventCount(g, ctx, name, startuptaint.EventReasonTaintAddedBack) }).Should(Equal(1))
		Expect(driver.Restart()).To(Succeed())
		Eventually(taints(ctx)).Should(BeEmpty())
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		Expect(node.Annotations).To(HaveKeyWithValue(startuptaint.BootAnnotation, startupTaint.Key+"=boot-2"))

		By("a graceful shutdown: kubelet's Ready condition says so, then the agent is stopped")
		writeStatus(ctx, ready(corev1.ConditionFalse, "[container runtime is down, "+startuptaint.NodeShuttingDownMessage+"]"))
		stop(agent)
		Expect(taints(ctx)(Default)).To(ConsistOf(putBack), "back before the agent exits")
	})
})
