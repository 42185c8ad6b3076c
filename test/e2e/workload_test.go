package e2e

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/expectations"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
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
	deleteNodeAfterSpec(node)
	for i := range pods {
		workloadPod(ctx, node, fmt.Sprintf("%s-%d", node, i))
	}
	failures := workload.NewMountFailures()
	kubelet, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: node,
		RegisterWithTaints: []corev1.Taint{startupTaint}, Log: io.MultiWriter(GinkgoWriter, failures)})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(kubelet.Stop)
	driver, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, readiness)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(driver.Stop)
	agent := runBinary(append([]string{"--kubeconfig=" + kubeconfig, expectations.Unconfined, "--node-name=" + node, "--csi-address=" + driver.Path(),
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms"}, agentArgs...)...)
	return &workloadNode{name: node, agent: agent, kubelet: kubelet, driver: driver, failures: failures}
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

	It("sees the failure it prevents when the taint goes before kubelet registers the driver", func(ctx SpecContext) {
		run := runWorkload(ctx, "e2e-workload-early", "--require-csinode=false")
		GinkgoWriter.Printf("--require-csinode=false: %d failed mounts, %d volumes published\n", run.failed, len(run.published))
		Expect(run.failed).To(BeNumerically(">", 0))
		Expect(run.examples).To(ContainElement(ContainSubstring(workload.NotRegistered)))
	})
})
