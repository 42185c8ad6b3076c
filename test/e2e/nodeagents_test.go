// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// agentsTaint is the one startup taint of every node agent (config/samples/node-agents).
var agentsTaint = corev1.Taint{Key: "startup-taint-remover.github.io/agents-not-ready", Effect: corev1.TaintEffectNoSchedule}

// agentsNamespace holds the node agents' DaemonSets of these specs.
const agentsNamespace = "e2e-agents"

// agentsNode is a node that joins with agentsTaint, and its agent with --node-agents=all alone.
type agentsNode struct {
	name     string
	agent    *gexec.Session
	kubelet  *hollowkubelet.Kubelet
	driver   *fakecsi.Driver
	failures *workload.MountFailures
}

// startAgentsNode creates pods pods that need the driver on node, then starts node's kubelet with
// agentsTaint, the driver in the plugin directory workload.CSIAgent mounts (not registered with
// kubelet yet), and the agent with --node-agents=all and no other gate, and extra.
func startAgentsNode(ctx context.Context, node string, pods int, extra ...string) *agentsNode {
	GinkgoHelper()
	kubelet, failures := joinWithPods(ctx, node, pods, agentsTaint)
	socket := workload.DriverSocket(kubelet.RootDir, driverName)
	Expect(os.MkdirAll(filepath.Dir(socket), 0o755)).To(Succeed())
	driver, err := fakecsi.Start(socket, driverName, fakecsi.Ready)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(driver.Stop)
	agent := runBinary(append([]string{"--kubeconfig=" + kubeconfig, testkit.Unconfined, "--node-name=" + node,
		"--node-agents=all", "--node-agent-namespaces=" + agentsNamespace, "--taint=" + agentsTaint.Key + ":" + string(agentsTaint.Effect), "--plugins-registry=" + kubelet.PluginsRegistry(),
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms"}, extra...)...)
	return &agentsNode{name: node, agent: agent, kubelet: kubelet, driver: driver, failures: failures}
}

// createAgent creates ds until the spec ends.
func createAgent(ctx context.Context, ds *appsv1.DaemonSet) *appsv1.DaemonSet {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, ds)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ds, client.PropagationPolicy(metav1.DeletePropagationBackground)))).To(Succeed())
	})
	return ds
}

// agentPodState is whether ds has a pod on node, and whether it is Ready.
func agentPodState(ctx context.Context, ds *appsv1.DaemonSet, node string) func() string {
	return func() string {
		pod, err := workload.AgentPod(ctx, k8sClient, ds, node)
		if err != nil {
			return "none"
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return "Ready"
			}
		}
		return "not Ready"
	}
}

// waitingNotes are the notes of the agent's events that say what holds node.
func waitingNotes(ctx context.Context, node string) func(Gomega) string {
	return func(g Gomega) string {
		notes, err := testkit.EventNotes(ctx, k8sClient, node, startuptaint.EventReasonWaitingForAgent)
		g.Expect(err).NotTo(HaveOccurred())
		more, err := testkit.EventNotes(ctx, k8sClient, node, startuptaint.EventReasonWaitingForDriver)
		g.Expect(err).NotTo(HaveOccurred())
		return strings.Join(append(notes, more...), "\n")
	}
}

var _ = Describe("every node agent, no configuration, with the real DaemonSet controller, scheduler and kubelet", Serial, Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		cp, err := workload.StartControlPlane(kubeconfig, io.Discard, "daemonset-controller", "deployment-controller", "replicaset-controller")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		csiDriver := workload.CSIDriver(driverName)
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, csiDriver))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, csiDriver))).To(Succeed()) })
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentsNamespace}}
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, ns))).To(Succeed())
	})

	// readinessOnly plays a central controller that decides on the DaemonSets' pods' readiness
	// alone, as vigil does: the agent without kubelet's plugins registry.
	DescribeTable("holds the taint until the last agent is Ready, counting a DaemonSet added meanwhile",
		func(ctx SpecContext, readinessOnly bool) {
			node, pods := "e2e-agents", 3
			var extra []string
			if readinessOnly {
				node, extra = "e2e-agents-readiness-only", []string{"--plugins-registry="}
			}
			cni := createAgent(ctx, workload.Agent(agentsNamespace, "cni", &agentsTaint, true))
			csi := createAgent(ctx, workload.CSIAgent(agentsNamespace, "csi", driverName, &agentsTaint))
			logs := createAgent(ctx, workload.Agent(agentsNamespace, "logs", &agentsTaint, true, "/var/log"))
			app := createAgent(ctx, workload.Agent(agentsNamespace, "app", nil, false))
			n := startAgentsNode(ctx, node, pods, extra...)
			held := hasTaint(ctx, k8sClient, node, agentsTaint.Key)

			By("the three agents that tolerate the taint get pods; the CSI driver's is Ready, its registrar not serving yet")
			Eventually(agentPodState(ctx, csi, node), time.Minute).Should(Equal("Ready"))
			Eventually(agentPodState(ctx, cni, node)).Should(Equal("not Ready"))
			Eventually(agentPodState(ctx, logs, node)).Should(Equal("not Ready"))
			Eventually(waitingNotes(ctx, node), 30*time.Second).Should(And(ContainSubstring(agentsNamespace+"/cni"),
				ContainSubstring(agentsNamespace+"/logs")))
			Expect(agentPodState(ctx, app, node)()).To(Equal("none"), "the agent that does not tolerate the taint waits for it to go")

			By("a DaemonSet added while the node waits")
			late := createAgent(ctx, workload.Agent(agentsNamespace, "late", &agentsTaint, true))
			Eventually(agentPodState(ctx, late, node), time.Minute).Should(Equal("not Ready"))

			By("the CNI agent, the log shipper and the late agent Ready, one by one")
			for _, ds := range []*appsv1.DaemonSet{cni, logs, late} {
				Consistently(held, "1s", "100ms").Should(BeTrue(), "held while %s is not Ready", ds.Name)
				Expect(workload.SetAgentReady(ctx, k8sClient, ds, node)).To(Succeed())
				Eventually(agentPodState(ctx, ds, node)).Should(Equal("Ready"))
			}
			if readinessOnly {
				By("every pod Ready: the taint goes, and the registrar registers the driver a while later")
				Eventually(held, 30*time.Second, 10*time.Millisecond).Should(BeFalse())
				time.Sleep(workload.RegistrarDelay)
				register(n.kubelet, n.driver)
			} else {
				Consistently(held, "3s", "100ms").Should(BeTrue(), "held while the driver's registrar does not serve")
				Expect(waitingNotes(ctx, node)(Default)).To(ContainSubstring("serves no plugin there yet: " + agentsNamespace + "/csi"))

				By("the registrar registering the driver with kubelet")
				register(n.kubelet, n.driver)
				var listed time.Time
				Eventually(func(g Gomega) map[string]int32 {
					listed = time.Now()
					return csiNodeDrivers(ctx, node)(g)
				}, time.Minute, 10*time.Millisecond).Should(HaveKey(driverName))
				Eventually(held, 30*time.Second, 10*time.Millisecond).Should(BeFalse())
				GinkgoWriter.Printf("every node agent: the taint went %s after kubelet listed the driver\n", time.Since(listed).Round(time.Millisecond))
			}

			Eventually(func() int { return len(n.driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", pods))
			failed, examples := n.failures.Count()
			GinkgoWriter.Printf("%s: %d failed mounts\n", node, failed)
			if readinessOnly {
				Expect(failed).To(BeNumerically(">", 0), "the pods that land before kubelet knows the driver fail their mounts")
				Expect(examples).To(ContainElement(ContainSubstring(workload.NotRegistered)))
			} else {
				Expect(failed).To(BeZero(), "failed mounts: %v", examples)
			}
			Eventually(agentPodState(ctx, app, node), time.Minute).ShouldNot(Equal("none"), "the DaemonSet that waited for the taint runs now")
		},
		Entry("every node agent, no configuration: and kubelet lists the driver; no mount fails", false),
		Entry("pod readiness only, as a central controller decides: the mounts of pods that land before the driver is registered fail", true),
	)

	// A cold start: every node registers with the taint, and the CNI agent turns Ready only once its
	// Typha, a Deployment, runs somewhere. Typha does not tolerate the taint; its namespace, labelled,
	// makes its pod tolerate it (config/components/tolerate-startup-taints), so it runs on a tainted
	// node, the agents turn Ready and every node is released, with no mount failed. Without the
	// label no node would ever be: make bench's cold start measures how soon the agent names Typha.
	It("on a cold start, releases every node once the agents' dependency tolerates the taint in a labelled namespace", func(ctx SpecContext) {
		remove, err := workload.InstallTolerationPolicies(ctx, k8sClient, agentsTaint.Key+":"+string(agentsTaint.Effect))
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(remove(ctx)).To(Succeed()) })
		label := func(ctx context.Context, labelled bool) {
			GinkgoHelper()
			ns := &corev1.Namespace{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: agentsNamespace}, ns)).To(Succeed())
			orig := ns.DeepCopy()
			if labelled {
				ns.Labels = map[string]string{startuptaint.TolerateLabel: "true"}
			} else {
				delete(ns.Labels, startuptaint.TolerateLabel)
			}
			Expect(k8sClient.Patch(ctx, ns, client.MergeFrom(orig))).To(Succeed())
		}
		label(ctx, true)
		DeferCleanup(func(ctx SpecContext) { label(ctx, false) })
		// The API server applies a new policy a moment after it is created.
		Eventually(func(g Gomega) {
			probe := workload.Pod(agentsNamespace, "tolerate-probe", "nowhere", driverName)
			g.Expect(k8sClient.Create(ctx, probe, client.DryRunAll)).To(Succeed())
			g.Expect(probe.Spec.Tolerations).To(ContainElement(HaveField("Key", agentsTaint.Key)))
		}).Should(Succeed())

		typha := workload.Deployment(agentsNamespace, "typha")
		Expect(k8sClient.Create(ctx, typha)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, typha, client.PropagationPolicy(metav1.DeletePropagationBackground)))).To(Succeed())
		})
		cni := createAgent(ctx, workload.Agent(agentsNamespace, "calico-node", &agentsTaint, true))
		csi := createAgent(ctx, workload.CSIAgent(agentsNamespace, "csi", driverName, &agentsTaint))
		const pods = 2
		nodes := map[string]*agentsNode{}
		for _, name := range []string{"e2e-cold-1", "e2e-cold-2"} {
			nodes[name] = startAgentsNode(ctx, name, pods)
		}

		By("Typha, given the toleration, runs on a tainted node")
		Eventually(func() ([]string, error) { return workload.RunningOn(ctx, k8sClient, typha) }, time.Minute).ShouldNot(BeEmpty())
		By("the CNI agents turn Ready, as calico-node once Typha answers, and the registrars register the driver")
		for name, n := range nodes {
			Eventually(agentPodState(ctx, csi, name), time.Minute).Should(Equal("Ready"))
			Eventually(agentPodState(ctx, cni, name), time.Minute).Should(Equal("not Ready"))
			Expect(workload.SetAgentReady(ctx, k8sClient, cni, name)).To(Succeed())
			register(n.kubelet, n.driver)
		}
		for name, n := range nodes {
			Eventually(hasTaint(ctx, k8sClient, name, agentsTaint.Key), time.Minute, 10*time.Millisecond).Should(BeFalse(), "%s released", name)
			Eventually(func() int { return len(n.driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", pods))
			failed, examples := n.failures.Count()
			Expect(failed).To(BeZero(), "%s: failed mounts: %v", name, examples)
		}
	})

	// A tenant who may only create pods, in its own namespace, binds a Ready pod to the node whose
	// controller reference names a node agent's DaemonSet by name and UID.
	It("is not released by a pod of another namespace that names a node agent's DaemonSet as its controller", func(ctx SpecContext) {
		const node, tenant = "e2e-agents-forged", "e2e-agents-tenant"
		victim := createAgent(ctx, workload.Agent(agentsNamespace, "victim", &agentsTaint, true))
		startAgentsNode(ctx, node, 0)
		held := hasTaint(ctx, k8sClient, node, agentsTaint.Key)
		Eventually(agentPodState(ctx, victim, node), time.Minute).Should(Equal("not Ready"))

		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())
		forged := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: tenant,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: victim.Name, UID: victim.UID,
				Controller: ptr.To(true)}}},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.example/app"}}}}
		Expect(k8sClient.Create(ctx, forged)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, forged))).To(Succeed()) })
		Eventually(func(g Gomega) corev1.ConditionStatus {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(forged), forged)).To(Succeed())
			for _, c := range forged.Status.Conditions {
				if c.Type == corev1.PodReady {
					return c.Status
				}
			}
			return corev1.ConditionUnknown
		}, time.Minute).Should(Equal(corev1.ConditionTrue), "kubelet runs the tenant's pod")
		Consistently(held, "3s", "100ms").Should(BeTrue(), "held while the DaemonSet's own pod is not Ready")
		Expect(waitingNotes(ctx, node)(Default)).To(ContainSubstring(agentsNamespace + "/victim"))

		Expect(workload.SetAgentReady(ctx, k8sClient, victim, node)).To(Succeed())
		Eventually(held, 30*time.Second, 10*time.Millisecond).Should(BeFalse(), "released once the DaemonSet's own pod is Ready")
	})

	// A tenant who may only create DaemonSets in its own namespace makes one that tolerates every
	// taint and whose pod is never Ready: only the namespaces the admin named count, at the node's
	// start and in continuous mode.
	It("is not held by a DaemonSet in a namespace it was not given, whose pod is never Ready", func(ctx SpecContext) {
		const node, tenant = "e2e-agents-tenant-daemonset", "e2e-agents-tenant-ds"
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenant}}))).To(Succeed())
		hold := workload.Agent(tenant, "hold", &agentsTaint, true)
		hold.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		createAgent(ctx, hold)
		own := createAgent(ctx, workload.Agent(agentsNamespace, "own", &agentsTaint, true))
		startAgentsNode(ctx, node, 0, "--retaint-after=1s")
		held := hasTaint(ctx, k8sClient, node, agentsTaint.Key)
		Eventually(agentPodState(ctx, hold, node), time.Minute).Should(Equal("not Ready"), "the DaemonSet controller runs the tenant's pod")
		Eventually(agentPodState(ctx, own, node), time.Minute).Should(Equal("not Ready"))
		Eventually(waitingNotes(ctx, node), 30*time.Second).Should(ContainSubstring(agentsNamespace + "/own"))
		Expect(held(Default)).To(BeTrue(), "held while the node agent's own pod is not Ready")
		Expect(waitingNotes(ctx, node)(Default)).NotTo(ContainSubstring(tenant))

		Expect(workload.SetAgentReady(ctx, k8sClient, own, node)).To(Succeed())
		Eventually(held, 30*time.Second, 10*time.Millisecond).Should(BeFalse(), "released while the tenant's pod is still not Ready")
		Expect(agentPodState(ctx, hold, node)()).To(Equal("not Ready"))

		By("continuous mode: another such DaemonSet of the tenant's, once the node runs, puts no taint back")
		later := workload.Agent(tenant, "later", &agentsTaint, true)
		later.Spec.Template.Spec.Tolerations = hold.Spec.Template.Spec.Tolerations
		createAgent(ctx, later)
		Eventually(agentPodState(ctx, later, node), time.Minute).Should(Equal("not Ready"))
		Consistently(held, "3s", "100ms").Should(BeFalse(), "not put back, with --retaint-after=1s")
	})

	It("with --max-wait, lets pods in at the deadline, and its event names the DaemonSet that never became Ready", func(ctx SpecContext) {
		const node = "e2e-agents-max-wait"
		createAgent(ctx, workload.Agent(agentsNamespace, "stuck", &agentsTaint, true))
		n := startAgentsNode(ctx, node, 0, "--max-wait=8s")
		created := &corev1.Node{}
		Eventually(func() error { return k8sClient.Get(ctx, client.ObjectKey{Name: node}, created) }, time.Minute).Should(Succeed())
		Eventually(hasTaint(ctx, k8sClient, node, agentsTaint.Key), time.Minute, 50*time.Millisecond).Should(BeFalse())
		Expect(time.Since(created.CreationTimestamp.Time)).To(BeNumerically(">=", 7*time.Second), "not before the deadline")
		Eventually(func(g Gomega) []string {
			notes, err := testkit.EventNotes(ctx, k8sClient, node, startuptaint.EventReasonTaintRemovedUnready)
			g.Expect(err).NotTo(HaveOccurred())
			return notes
		}).Should(ContainElement(ContainSubstring(agentsNamespace + "/stuck")))
		Expect(n.agent.Err.Contents()).To(ContainSubstring("removed startup taints although a gate does not pass"))
	})
})
