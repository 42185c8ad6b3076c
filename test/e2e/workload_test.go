// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// workloadRun is what one node's start did to the pods that need its driver.
type workloadRun struct {
	agent     *gexec.Session
	failed    int
	examples  []string
	published []fakecsi.Publish
	taintGone time.Time
}

// workloadPod creates a pod that needs the driver and may only run on node, until the spec ends.
func workloadPod(ctx context.Context, node, name string) *corev1.Pod {
	GinkgoHelper()
	pod := workload.Pod("default", name, node, driverName)
	Expect(k8sClient.Create(ctx, pod)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(0)))).To(Succeed())
	})
	return pod
}

// workloadNode is one node's start for a workload: its kubelet, its driver and the failed mounts
// kubelet logs.
type workloadNode struct {
	name     string
	agent    *gexec.Session
	kubelet  *hollowkubelet.Kubelet
	driver   *fakecsi.Driver
	failures *workload.MountFailures
}

// startWorkloadNode creates pods pods that need the driver before their node joins, and starts
// the node's kubelet (which registers it with the startup taint), the driver answering readiness,
// and the agent with agentArgs. The driver is not registered with kubelet yet.
func startWorkloadNode(ctx context.Context, node string, pods int, readiness fakecsi.Readiness, agentArgs ...string) *workloadNode {
	GinkgoHelper()
	kubelet, failures := joinWithPods(ctx, node, pods, startupTaint)
	driver, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, readiness)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(driver.Stop)
	agent := runBinary(append([]string{"--kubeconfig=" + kubeconfig, testkit.Unconfined, "--node-name=" + node, "--csi-address=" + driver.Path(),
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms"}, agentArgs...)...)
	return &workloadNode{name: node, agent: agent, kubelet: kubelet, driver: driver, failures: failures}
}

// joinWithPods creates pods pods that need the driver and may only run on node, then starts
// node's kubelet, which registers it with taint; failures counts the mounts kubelet fails. The
// Node goes when the spec ends.
func joinWithPods(ctx context.Context, node string, pods int, taint corev1.Taint) (*hollowkubelet.Kubelet, *workload.MountFailures) {
	GinkgoHelper()
	deleteNodeAfterSpec(node)
	for i := range pods {
		workloadPod(ctx, node, fmt.Sprintf("%s-%d", node, i))
	}
	failures := workload.NewMountFailures()
	kubelet, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: node,
		RegisterWithTaints: []corev1.Taint{taint}, Log: io.MultiWriter(GinkgoWriter, failures)})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(kubelet.Stop)
	return kubelet, failures
}

// runWorkload starts a node with three pods that need its driver (startWorkloadNode), registers
// the driver with kubelet workload.RegistrarDelay late, as a slow registrar does, and waits until kubelet has
// published every pod's volume through the driver.
func runWorkload(ctx context.Context, node string, agentArgs ...string) workloadRun {
	GinkgoHelper()
	const pods = 3
	n := startWorkloadNode(ctx, node, pods, fakecsi.Ready, agentArgs...)
	kubelet, driver, failures := n.kubelet, n.driver, n.failures
	taintGone := make(chan time.Time, 1)
	go func() {
		defer GinkgoRecover()
		Eventually(hasTaint(ctx, k8sClient, node, startupTaint.Key), time.Minute, 10*time.Millisecond).Should(BeFalse())
		taintGone <- time.Now()
	}()
	time.Sleep(workload.RegistrarDelay)
	register(kubelet, driver)
	Eventually(func() int { return len(driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", pods),
		"kubelet publishes every pod's volume")
	run := workloadRun{agent: n.agent, published: driver.Published()}
	run.failed, run.examples = failures.Count()
	Eventually(taintGone).Should(Receive(&run.taintGone))
	return run
}

var _ = Describe("a workload that needs the driver, with the real scheduler and kubelet", Serial, Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		cp, err := workload.StartControlPlane(kubeconfig, io.Discard)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		csiDriver := workload.CSIDriver(driverName)
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, csiDriver))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, csiDriver))).To(Succeed()) })
	})

	It("lands no pod before its driver is registered: every volume is published, and no mount fails", func(ctx SpecContext) {
		run := runWorkload(ctx, "e2e-workload")
		GinkgoWriter.Printf("defaults: %d failed mounts, %d volumes published, the first %s after the taint went\n",
			run.failed, len(run.published), run.published[0].At.Sub(run.taintGone))
		Expect(run.failed).To(BeZero(), "failed mounts: %v", run.examples)
		Expect(run.agent.Err).To(gbytes.Say(`"the driver's CSIDriver does not set preventPodSchedulingIfMissing \(or there is none\)`),
			"the agent reports that its driver's CSIDriver leaves the scheduler's check off")
		for _, p := range run.published {
			Expect(p.At).To(BeTemporally(">", run.taintGone), "volume %s published before the taint went", p.VolumeID)
		}
	})

	It("in continuous mode, keeps new pods off while the driver is down and leaves running pods alone", func(ctx SpecContext) {
		const node = "e2e-workload-continuous"
		n := startWorkloadNode(ctx, node, 2, fakecsi.Ready, "--taint="+startupTaint.Key, "--retaint-after=1s")
		register(n.kubelet, n.driver)
		Eventually(func() int { return len(n.driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", 2))

		By("the driver failing its Probe: the taint goes back on, as NoSchedule")
		n.driver.SetReadiness(fakecsi.Failing)
		retaint := corev1.Taint{Key: startupTaint.Key, Effect: corev1.TaintEffectNoSchedule}
		Eventually(func(g Gomega) []corev1.Taint {
			n := &corev1.Node{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
			return n.Spec.Taints
		}, 30*time.Second).Should(ContainElement(retaint))
		late := workloadPod(ctx, node, node+"-late")
		Consistently(func(g Gomega) string {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(late), late)).To(Succeed())
			return late.Spec.NodeName
		}, "3s").Should(BeEmpty(), "a new pod is not scheduled while the driver is down")
		for i := range 2 {
			running := &corev1.Pod{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: "default", Name: fmt.Sprintf("%s-%d", node, i)}, running)).To(Succeed())
			Expect(running.DeletionTimestamp).To(BeNil(), "a running pod stays")
			Expect(running.Spec.NodeName).To(Equal(node))
		}

		By("the driver healthy again: the taint goes, and the new pod's volume is published")
		n.driver.SetReadiness(fakecsi.Ready)
		Eventually(func() int { return len(n.driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", 3))
		failed, examples := n.failures.Count()
		Expect(failed).To(BeZero(), "failed mounts: %v", examples)
	})

	It("with --max-wait and a driver that never registers, lets pods in at the deadline, and their mounts fail", func(ctx SpecContext) {
		const node = "e2e-workload-max-wait"
		n := startWorkloadNode(ctx, node, 1, fakecsi.NotReady, "--max-wait=5s")
		created := &corev1.Node{}
		Eventually(func() error { return k8sClient.Get(ctx, client.ObjectKey{Name: node}, created) }, time.Minute).Should(Succeed())
		Eventually(hasTaint(ctx, k8sClient, node, startupTaint.Key), time.Minute, 50*time.Millisecond).Should(BeFalse())
		Expect(time.Since(created.CreationTimestamp.Time)).To(BeNumerically(">=", 4*time.Second), "not before the deadline")
		Eventually(func() int { failed, _ := n.failures.Count(); return failed }, time.Minute).Should(BeNumerically(">", 0),
			"fail-open lets the pod in, and kubelet cannot mount its volume")
		_, examples := n.failures.Count()
		Expect(examples).To(ContainElement(ContainSubstring(workload.NotRegistered)))
		Expect(n.driver.Published()).To(BeEmpty())
	})

	// A rolling OS upgrade's reboot: the node is drained, goes down long enough for the node
	// lifecycle controller to mark it unreachable, and comes back with its kubelet and the agent
	// at once, and the driver and its registrar workload.RegistrarDelay late. A pod that needs the
	// driver is created every second from when the node is known to be down until 5 s after its
	// driver is back, and the mounts kubelet fails after the reboot are counted. kubemark's fake
	// cAdvisor reports no boot ID, so a MutatingAdmissionPolicy writes it into kubelet's
	// registration and status writes, as kubelet's status setter (pkg/kubelet/nodestatus) copies
	// the host's at every start. The hollow kubelet has no graceful shutdown either, so that entry
	// does what kubelet's shutdown manager (pkg/kubelet/nodeshutdown) does: Ready False with "node
	// is shutting down", then it stops the pods, the agent and the registrar among them.
	DescribeTable("after a reboot, lands no pod before its driver is registered again", Label(reboot),
		func(ctx SpecContext, bootID, drained, graceful, crashPolicy bool, want rebootOutcome) {
			node := fmt.Sprintf("e2e-reboot-%v-%v-%v-%v", bootID, drained, graceful, crashPolicy)
			if bootID {
				stampBootID(ctx, node, "boot-1")
			}
			if crashPolicy {
				uninstall, err := workload.InstallCrashPolicy(ctx, k8sClient, startupTaint.Key+":"+string(startupTaint.Effect))
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(uninstall)
			}
			n := startWorkloadNode(ctx, node, 1, fakecsi.Ready, "--taint="+startupTaint.Key+":"+string(startupTaint.Effect))
			registrar := register(n.kubelet, n.driver)
			Eventually(func() int { return len(n.driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(Equal(1))
			Eventually(hasTaint(ctx, k8sClient, node, startupTaint.Key), time.Minute).Should(BeFalse())

			By("draining the node (or not: a crash) and taking it down until it is unreachable")
			if drained {
				Expect(testkit.UpdateNode(ctx, k8sClient, node, func(n *corev1.Node) { n.Spec.Unschedulable = true })).To(Succeed())
				time.Sleep(time.Second) // a drain's evictions take a while
			}
			Expect(k8sClient.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("default"), client.MatchingFields{"spec.nodeName": node},
				client.GracePeriodSeconds(0))).To(Succeed())
			if graceful {
				Expect(workload.ShutDown(ctx, k8sClient, node)).To(Succeed())
			}
			n.agent.Signal(syscall.SIGTERM)
			Eventually(n.agent, 10*time.Second).Should(gexec.Exit(0))
			if graceful {
				// The registrar removes its socket as it stops, and kubelet, still running,
				// unregisters the driver: it leaves CSINode (pkg/volume/csi/nodeinfomanager).
				registrar.Unregister()
				Eventually(csiNodeDrivers(ctx, node), 30*time.Second).ShouldNot(HaveKey(driverName))
			}
			n.driver.Stop()
			n.kubelet.Stop()
			Eventually(hasTaint(ctx, k8sClient, node, corev1.TaintNodeUnreachable), 2*time.Minute, 500*time.Millisecond).Should(BeTrue())
			// From here, as a reboot takes minutes: pods that arrive once the node is known to be
			// down. (Those that arrive before the node lifecycle controller notices, about 50 s,
			// land on it whatever the strategy, unless a graceful shutdown put the taint back.)
			arrivals, arrived := make(chan struct{}), make(chan []*corev1.Pod)
			go func() {
				defer GinkgoRecover()
				var pods []*corev1.Pod
				for {
					select {
					case <-arrivals:
						arrived <- pods
						return
					case <-time.After(time.Second):
						pod := workload.Pod("default", fmt.Sprintf("%s-after-%d", node, len(pods)), node, driverName)
						Expect(k8sClient.Create(ctx, pod)).To(Succeed())
						pods = append(pods, pod)
					}
				}
			}()
			if bootID {
				stampBootID(ctx, node, "boot-2")
			}
			time.Sleep(3 * time.Second) // a few pods pending while it is down

			By("bringing it back: kubelet and the agent at once, the driver and its registrar late")
			back := time.Now()
			returned := workload.WatchReturn(ctx, k8sClient, node, startupTaint.Key, back)
			failures := workload.NewMountFailures()
			kubelet, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: node,
				RegisterWithTaints: []corev1.Taint{startupTaint}, Log: io.MultiWriter(GinkgoWriter, failures)})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(kubelet.Stop)
			if !graceful {
				// A crash leaves the registrar's socket on disk (a graceful stop removes it).
				// kubemark makes a new root directory at every start, so it is put there.
				Expect(fakecsi.LeaveStaleRegistration(kubelet.PluginsRegistry(), driverName)).To(Succeed())
			}
			runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+node, "--csi-address="+n.driver.Path(),
				"--taint="+startupTaint.Key+":"+string(startupTaint.Effect), "--metrics-bind-address=0", "--health-probe-bind-address=0",
				"--probe-interval=200ms", "--plugins-registry="+kubelet.PluginsRegistry())
			if drained {
				// The upgrade tool uncordons the node once it is back.
				Expect(testkit.UpdateNode(ctx, k8sClient, node, func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(Succeed())
			}
			time.Sleep(workload.RegistrarDelay)
			Expect(n.driver.Restart()).To(Succeed())
			driverBack := time.Now()
			register(kubelet, n.driver)
			time.Sleep(5 * time.Second)
			close(arrivals)
			pods := <-arrived
			created := len(pods)
			DeferCleanup(func(ctx SpecContext) {
				for _, pod := range pods {
					Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(0)))).To(Succeed())
				}
			})
			Eventually(func() int { return len(n.driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", 1+created),
				"kubelet publishes every new pod's volume")
			r := <-returned
			failed, examples := failures.Count()
			early, failedLater := 0, 0
			failedPods := failures.Pods()
			for _, pod := range pods {
				got := &corev1.Pod{}
				Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
				placedEarly := false
				for _, c := range got.Status.Conditions {
					// Conditions carry seconds: a pod scheduled in the second before the driver
					// answered counts as scheduled after it.
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && c.LastTransitionTime.Add(time.Second).Before(driverBack) {
						placedEarly = true
					}
				}
				if placedEarly {
					early++
				} else {
					failedLater += failedPods[pod.Name]
				}
			}
			GinkgoWriter.Printf("reboot (boot ID %v, drained %v, graceful %v): %d pods created, %d placed before the driver answered again, %d failed mounts, "+
				"%d of them of pods placed later; from kubelet's return, %s\n", bootID, drained, graceful, created, early, failed, failedLater, r)
			for _, e := range examples {
				Expect(e).To(ContainSubstring(workload.NotRegistered), "the only failure is a driver kubelet has not registered yet")
			}
			switch want {
			case landsEarly:
				Expect(early).To(BeNumerically(">", 0), "pods pending while the node was down land as soon as kubelet is Ready")
				Expect(failed).To(BeNumerically(">", 0))
			case failsOnlyInWindow:
				Expect(early).To(BeNumerically(">", 0), "pods pending while the node was down land as soon as kubelet is Ready")
				Expect(failedLater).To(BeZero(), "no pod placed once the taint is back fails a mount")
			case noFailedMount:
				Expect(early).To(BeZero(), "no pod lands before the driver answers again")
				Expect(failed).To(BeZero(), "no pod lands before kubelet has registered the driver again")
			}
		},
		// A crash leaves the driver in CSINode, and kubelet does not rewrite an entry that has
		// not changed (pkg/volume/csi/nodeinfomanager): after a reboot the registration gate holds
		// until the registrar of this boot serves and kubelet has registered the driver again.
		// Only pods that land between kubelet's Ready and the agent's write, when there was no
		// graceful shutdown, can fail.
		Entry("drained, no boot ID reported: the agent can tell neither, as before the boot record", Label(drainedReboot),
			false, true, false, false, landsEarly),
		Entry("drained, the boot ID reported: the taint went back at the cordon and stays until kubelet registers the driver", Label(drainedReboot),
			true, true, false, false, noFailedMount),
		Entry("not drained (a crash), the boot ID reported: pods pending land between kubelet's Ready and the agent's write, and no later one fails",
			true, false, false, false, failsOnlyInWindow),
		// config/components/taint-after-crash, as every install on 1.36 and later has it: the
		// node lifecycle controller's write that lifts unreachable carries the startup taint back.
		Entry("not drained (a crash), the boot ID reported, with the crash policy: the taint is back in the write that lets pods back, and no pod lands early",
			true, false, false, true, noFailedMount),
		Entry("kubelet's graceful shutdown, the boot ID reported: the taint went back as the node shut down, and stays until kubelet registers the driver", true, false, true, false, noFailedMount),
	)

	It("sees the failure it prevents when the taint goes before kubelet registers the driver", func(ctx SpecContext) {
		run := runWorkload(ctx, "e2e-workload-early", "--require-csinode=false")
		GinkgoWriter.Printf("--require-csinode=false: %d failed mounts, %d volumes published\n", run.failed, len(run.published))
		Expect(run.failed).To(BeNumerically(">", 0))
		Expect(run.examples).To(ContainElement(ContainSubstring(workload.NotRegistered)))
	})
})

// The labels by which make test runs the reboots, each a minute of waiting for the node lifecycle
// controller, in processes of their own beside the rest of the suite.
const (
	reboot        = "reboot"
	drainedReboot = "drained"
)

// stampBootID makes every registration and status write of node carry bootID
// (workload.StampBootID) until the spec ends.
func stampBootID(ctx context.Context, node, bootID string) {
	GinkgoHelper()
	Expect(workload.StampBootID(ctx, k8sClient, node, bootID)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(workload.UnstampBootID(ctx, k8sClient, node)).To(Succeed()) })
}

// rebootOutcome is what a reboot entry asserts of the pods that arrived while its node was down.
type rebootOutcome int

const (
	// landsEarly: pods land before the driver answers again, and mounts fail.
	landsEarly rebootOutcome = iota
	// failsOnlyInWindow: pods land before the driver answers again, but only they fail mounts.
	failsOnlyInWindow
	// noFailedMount: no pod lands before the driver answers, and no mount fails.
	noFailedMount
)
