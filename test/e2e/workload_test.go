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
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
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

	// A rolling OS upgrade's reboot: the node is drained, goes down long enough for the node
	// lifecycle controller to mark it unreachable, and comes back with its kubelet and the agent
	// at once, and the driver and its registrar workload.RegistrarDelay late. A pod that needs the
	// driver is created every second from when the node is known to be down until 5 s after its
	// driver is back, and the mounts kubelet fails after the reboot are counted. kubemark's fake cAdvisor reports no boot ID, so a MutatingAdmissionPolicy writes it
	// into kubelet's registration and status writes, as kubelet's status setter
	// (pkg/kubelet/nodestatus) copies the host's at every start.
	DescribeTable("after a reboot, lands no pod before its driver is registered again",
		func(ctx SpecContext, bootID, drained, heldUntilDriver bool) {
			node := fmt.Sprintf("e2e-reboot-%v-%v", bootID, drained)
			if bootID {
				stampBootID(ctx, node, "boot-1")
			}
			n := startWorkloadNode(ctx, node, 1, fakecsi.Ready, "--taint="+startupTaint.Key+":"+string(startupTaint.Effect))
			register(n.kubelet, n.driver)
			Eventually(func() int { return len(n.driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(Equal(1))
			Eventually(hasTaint(ctx, k8sClient, node, startupTaint.Key), time.Minute).Should(BeFalse())

			By("draining the node (or not: a crash) and taking it down until it is unreachable")
			if drained {
				Expect(expectations.UpdateNode(ctx, k8sClient, node, func(n *corev1.Node) { n.Spec.Unschedulable = true })).To(Succeed())
				time.Sleep(time.Second) // a drain's evictions take a while
			}
			Expect(k8sClient.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace("default"), client.MatchingFields{"spec.nodeName": node},
				client.GracePeriodSeconds(0))).To(Succeed())
			n.agent.Signal(syscall.SIGTERM)
			Eventually(n.agent, 10*time.Second).Should(gexec.Exit(0))
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
			go func() {
				defer GinkgoRecover()
				var putAt, liftedAt time.Duration
				for putAt == 0 || liftedAt == 0 {
					n := &corev1.Node{}
					if k8sClient.Get(ctx, client.ObjectKey{Name: node}, n) == nil {
						keys := map[string]bool{}
						for _, t := range n.Spec.Taints {
							keys[t.ToString()] = true
						}
						if putAt == 0 && keys[startupTaint.Key+":NoSchedule"] {
							putAt = time.Since(back)
						}
						if liftedAt == 0 && !keys[corev1.TaintNodeUnreachable+":NoSchedule"] {
							liftedAt = time.Since(back)
						}
					}
					if time.Since(back) > 20*time.Second {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				GinkgoWriter.Printf("after kubelet's return: %s:NoSchedule seen at %s, unreachable lifted at %s\n", startupTaint.Key, putAt, liftedAt)
			}()
			failures := workload.NewMountFailures()
			kubelet, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: node,
				RegisterWithTaints: []corev1.Taint{startupTaint}, Log: io.MultiWriter(GinkgoWriter, failures)})
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(kubelet.Stop)
			runBinary("--kubeconfig="+kubeconfig, expectations.Unconfined, "--node-name="+node, "--csi-address="+n.driver.Path(),
				"--taint="+startupTaint.Key+":"+string(startupTaint.Effect), "--metrics-bind-address=0", "--health-probe-bind-address=0",
				"--probe-interval=200ms")
			if drained {
				// The upgrade tool uncordons the node once it is back.
				Expect(expectations.UpdateNode(ctx, k8sClient, node, func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(Succeed())
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
			failed, examples := failures.Count()
			early := 0
			for _, pod := range pods {
				got := &corev1.Pod{}
				Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), got)).To(Succeed())
				for _, c := range got.Status.Conditions {
					// Conditions carry seconds: a pod scheduled in the second before the driver
					// answered counts as scheduled after it.
					if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && c.LastTransitionTime.Add(time.Second).Before(driverBack) {
						early++
					}
				}
			}
			GinkgoWriter.Printf("reboot (boot ID %v, drained %v): %d pods created, %d placed before the driver answered again, %d failed mounts\n",
				bootID, drained, created, early, failed)
			for _, e := range examples {
				Expect(e).To(ContainSubstring(workload.NotRegistered), "the only failure is a driver kubelet has not registered yet")
			}
			if heldUntilDriver {
				Expect(early).To(BeZero(), "no pod lands before the driver answers again")
			} else {
				Expect(early).To(BeNumerically(">", 0), "pods pending while the node was down land as soon as kubelet is Ready")
				Expect(failed).To(BeNumerically(">", 0))
			}
		},
		// Measured, and what is left: the driver answers its Probe workload.RegistrarDelay before
		// its registrar registers it with the new kubelet, and kubelet does not rewrite a CSINode
		// entry that has not changed (pkg/volume/csi/nodeinfomanager), so the CSINode gate finds
		// the entry of the boot before and the taint goes then; pods placed in that gap fail.
		Entry("drained, no boot ID reported: the agent can tell neither, as before the boot record", false, true, false),
		Entry("drained, the boot ID reported: the taint went back at the cordon and stays until the driver answers", true, true, true),
		Entry("not drained (a crash), the boot ID reported: pods pending land between kubelet's Ready and the agent's write", true, false, false),
	)

	It("sees the failure it prevents when the taint goes before kubelet registers the driver", func(ctx SpecContext) {
		run := runWorkload(ctx, "e2e-workload-early", "--require-csinode=false")
		GinkgoWriter.Printf("--require-csinode=false: %d failed mounts, %d volumes published\n", run.failed, len(run.published))
		Expect(run.failed).To(BeNumerically(">", 0))
		Expect(run.examples).To(ContainElement(ContainSubstring(workload.NotRegistered)))
	})
})

// stampBootID makes every registration and status write of node carry bootID in
// status.nodeInfo.bootID, as kubelet's status setter writes the host's, with a
// MutatingAdmissionPolicy, and waits until the API server applies it.
func stampBootID(ctx context.Context, node, bootID string) {
	GinkgoHelper()
	name := "boot-id-" + node
	policy := &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      ptr.To(admissionv1.Fail),
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update},
					Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes", "nodes/status"}}}}}},
			MatchConditions: []admissionv1.MatchCondition{{Name: "this-node", Expression: "object.metadata.name == '" + node + "'"},
				{Name: "kubelets-writes", Expression: "request.operation == 'CREATE' || has(request.subResource) && request.subResource == 'status'"}},
			Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration,
				ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: "Object{status: Object.status{nodeInfo: Object.status.nodeInfo{bootID: '" + bootID + "'}}}"}}},
		},
	}
	existing := &admissionv1.MutatingAdmissionPolicy{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, existing); err == nil {
		existing.Spec = policy.Spec
		Expect(k8sClient.Update(ctx, existing)).To(Succeed())
	} else {
		Expect(k8sClient.Create(ctx, policy)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, policy))).To(Succeed()) })
		binding := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name}}
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, binding))).To(Succeed()) })
	}
	// A dry-run registration shows the stamp once the API server applies this version.
	Eventually(func(g Gomega) string {
		probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		err := k8sClient.Create(ctx, probe, client.DryRunAll)
		if apierrors.IsAlreadyExists(err) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, probe)).To(Succeed())
			orig := probe.DeepCopy()
			probe.Status.Phase = corev1.NodeRunning
			g.Expect(k8sClient.Status().Patch(ctx, probe, client.MergeFrom(orig), client.DryRunAll)).To(Succeed())
		} else {
			g.Expect(err).NotTo(HaveOccurred())
		}
		return probe.Status.NodeInfo.BootID
	}, 30*time.Second).Should(Equal(bootID))
}
