// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

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

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// The scheduler's own check (KEP-5030, on by default in Kubernetes 1.37): with
// preventPodSchedulingIfMissing, NodeVolumeLimits keeps a pod off a node until the node's CSINode
// lists the driver of its volumes. These specs run it alone, with no startup taint and no agent,
// on the same path as the strategies of workload_test.go, for what it covers and what it does
// not; and once beside the agent.
var _ = Describe("the scheduler's own CSI check, with no startup taint", Serial, Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		cp, err := workload.StartControlPlane(kubeconfig, io.Discard)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(cp.Stop)
		csiDriver := workload.SchedulerCheckedCSIDriver(driverName)
		Expect(k8sClient.Create(ctx, csiDriver)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, csiDriver))).To(Succeed()) })
	})

	// run starts a node with three pods whose volumes are PVC-backed (claims) or inline, its
	// kubelet, and its driver, registered with kubelet workload.RegistrarDelay late; with
	// notReadyFor, the driver's Probe answers not ready, and it refuses volumes, for that long
	// after its registration; with agent, kubelet registers the Node with the startup taint and the
	// agent runs with its defaults. It waits until every volume is published and returns the
	// failed mounts, their causes, and the agent's session, if any.
	run := func(ctx context.Context, node string, claims bool, notReadyFor time.Duration, agent bool) (int, []string, *gexec.Session) {
		GinkgoHelper()
		const pods = 3
		deleteNodeAfterSpec(node)
		for i := range pods {
			for _, o := range workload.PodObjects("default", fmt.Sprintf("%s-%d", node, i), node, driverName, claims) {
				Expect(k8sClient.Create(ctx, o)).To(Succeed())
				DeferCleanup(func(ctx SpecContext) {
					Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, o, client.GracePeriodSeconds(0)))).To(Succeed())
				})
			}
		}
		failures := workload.NewMountFailures()
		var taints []corev1.Taint
		if agent {
			taints = []corev1.Taint{startupTaint}
		}
		kubelet, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: node, RegisterWithTaints: taints,
			Log: io.MultiWriter(GinkgoWriter, failures)})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(kubelet.Stop)
		readiness := fakecsi.Ready
		if notReadyFor > 0 {
			readiness = fakecsi.NotReady
		}
		driver, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, readiness)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(driver.Stop)
		// An attach limit, as the EBS driver publishes: the scheduler requeues a pod its check kept
		// off only when a CSINode update raises a driver's limit (isSchedulableAfterCSINodeUpdated,
		// v1.37.2). A driver without one leaves the pod to the unschedulable queue's periodic flush,
		// up to 5 minutes later; without this line, these pods were still Pending 2 minutes after
		// the registration.
		driver.SetMaxVolumes(25)
		var session *gexec.Session
		if agent {
			session = runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+node, "--csi-address="+driver.Path(),
				"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms")
		}
		time.Sleep(workload.RegistrarDelay)
		register(kubelet, driver)
		time.Sleep(notReadyFor)
		driver.SetReadiness(fakecsi.Ready)
		Eventually(func() int { return len(driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", pods),
			func() string {
				return "kubelet publishes every pod's volume; the pods: " + workload.PodStates(ctx, k8sClient, "default", node)
			})
		failed, _ := failures.Count()
		return failed, failures.Causes(0), session
	}

	It("keeps pods with PVC-backed volumes off the node until kubelet registers the driver: no mount fails", func(ctx SpecContext) {
		failed, causes, _ := run(ctx, "e2e-scheduler-check-pvc", true, 0, false)
		GinkgoWriter.Printf("no startup taint, preventPodSchedulingIfMissing, PVC-backed volumes: %d failed mounts\n", failed)
		Expect(failed).To(BeZero(), "failed mounts: %v", causes)
	})

	It("does not cover CSI inline volumes: their mounts fail until the driver is registered", func(ctx SpecContext) {
		failed, causes, _ := run(ctx, "e2e-scheduler-check-inline", false, 0, false)
		GinkgoWriter.Printf("no startup taint, preventPodSchedulingIfMissing, inline volumes: %d failed mounts\n", failed)
		Expect(failed).To(BeNumerically(">", 0))
		Expect(causes).To(ConsistOf(workload.NotRegistered))
	})

	It("does not cover a driver whose Probe is not ready after its registration: its mounts fail until it is ready", func(ctx SpecContext) {
		failed, causes, _ := run(ctx, "e2e-scheduler-check-not-ready", true, workload.NotReadyAfterRegistration, false)
		GinkgoWriter.Printf("no startup taint, preventPodSchedulingIfMissing, Probe not ready for %s after the registration: %d failed mounts\n",
			workload.NotReadyAfterRegistration, failed)
		Expect(failed).To(BeNumerically(">", 0))
		Expect(causes).To(ConsistOf(fakecsi.NotServing))
	})

	It("beside the agent's defaults, lets no mount fail while the driver's Probe is not ready", func(ctx SpecContext) {
		failed, causes, agent := run(ctx, "e2e-scheduler-check-both", true, workload.NotReadyAfterRegistration, true)
		GinkgoWriter.Printf("defaults and preventPodSchedulingIfMissing, Probe not ready for %s after the registration: %d failed mounts\n",
			workload.NotReadyAfterRegistration, failed)
		Expect(failed).To(BeZero(), "failed mounts: %v", causes)
		Expect(agent.Err).To(gbytes.Say(`"the driver's CSIDriver sets preventPodSchedulingIfMissing: on Kubernetes 1.37 and later`),
			"the agent reports its driver's field")
	})
})
