// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// startKubelet runs a hollow kubelet that registers node with the startup taint and the extra
// taints (when it creates the Node), until the spec ends, and waits for its Node.
func startKubelet(ctx context.Context, node string, extra ...corev1.Taint) *hollowkubelet.Kubelet {
	GinkgoHelper()
	k, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: node,
		RegisterWithTaints: append([]corev1.Taint{startupTaint}, extra...), Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(k.Stop)
	Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{})
	}, time.Minute).Should(Succeed(), "kubelet registers its Node")
	return k
}

// deleteNodeAfterSpec deletes the Node name and its CSINode, which a kubelet leaves behind, when
// the spec ends.
func deleteNodeAfterSpec(name string) {
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
	})
}

// startRegisteredDriver serves a ready test driver and registers it with kubelet, until the spec ends.
func startRegisteredDriver(kubelet *hollowkubelet.Kubelet) (*fakecsi.Driver, *fakecsi.Registrar) {
	GinkgoHelper()
	driver, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, fakecsi.Ready)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(driver.Stop)
	return driver, register(kubelet, driver)
}

// register registers driver with kubelet, as node-driver-registrar does, until it is
// unregistered or the spec ends.
func register(kubelet *hollowkubelet.Kubelet, driver *fakecsi.Driver) *fakecsi.Registrar {
	GinkgoHelper()
	reg, err := fakecsi.Register(kubelet.PluginsRegistry(), driver.Name(), driver.Path())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(reg.Unregister)
	return reg
}

// csiNodeDrivers returns the drivers kubelet has written into the node's CSINode, with their
// allocatable count (-1 when there is none), by name.
func csiNodeDrivers(ctx context.Context, node string) func(Gomega) map[string]int32 {
	return func(g Gomega) map[string]int32 {
		cn := &storagev1.CSINode{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Name: node}, cn); err != nil {
			g.Expect(client.IgnoreNotFound(err)).To(Succeed())
			return nil
		}
		out := map[string]int32{}
		for _, d := range cn.Spec.Drivers {
			out[d.Name] = -1
			if d.Allocatable != nil && d.Allocatable.Count != nil {
				out[d.Name] = *d.Allocatable.Count
			}
		}
		return out
	}
}

var _ = Describe("with the real kubelet (kubemark's hollow node)", Serial, func() {
	It("removes exactly its taint once kubelet has registered the driver, never before, and survives the driver's and kubelet's restarts",
		func(ctx SpecContext) {
			const name = "e2e-kubelet"
			drivers := csiNodeDrivers(ctx, name)
			deleteNodeAfterSpec(name)
			kubelet := startKubelet(ctx, name)
			Expect(hasTaint(ctx, k8sClient, name, startupTaint.Key)(Default)).To(BeTrue(), "kubelet registered its Node with the startup taint")
			Eventually(func() error {
				return k8sClient.Get(ctx, client.ObjectKey{Name: name}, &storagev1.CSINode{})
			}, time.Minute).Should(Succeed(), "kubelet writes its (empty) CSINode")

			driver, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, fakecsi.Ready)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(driver.Stop)
			metrics := freeAddr()
			agent := runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+name, "--csi-address="+driver.Path(),
				"--metrics-secure=false", "--metrics-bind-address="+metrics, "--health-probe-bind-address=0", "--probe-interval=200ms")
			Consistently(hasTaint(ctx, k8sClient, name, startupTaint.Key), "2s").Should(BeTrue(),
				"the driver is ready, but kubelet has not registered it")

			By("registering the driver with kubelet, as node-driver-registrar does")
			reg := register(kubelet, driver)
			Eventually(drivers, time.Minute).Should(HaveKey(driverName))
			Eventually(hasTaint(ctx, k8sClient, name, startupTaint.Key)).Should(BeFalse())
			Expect(reg.Statuses()).To(ContainElement(BeNil()), "kubelet reported the registration as done")
			node := &corev1.Node{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
			Expect(node.Spec.Taints).To(ContainElement(HaveField("Key", corev1.TaintNodeNotReady)), "a taint the agent does not own stays")
			Expect(node.Annotations).To(HaveKey("csi.volume.kubernetes.io/nodeid"), "kubelet wrote the driver's node ID")

			By("unregistering the driver and registering it again: kubelet's writes to its Node cause no reconcile and no request")
			reconciles := func(g Gomega) float64 {
				return metricSum(g, metrics, "controller_runtime_reconcile_total", `controller="startup-taint"`)
			}
			requests := func(g Gomega) float64 { return metricSum(g, metrics, "rest_client_requests_total", "") }
			Eventually(func(g Gomega) {
				before := reconciles(g)
				g.Consistently(reconciles, "1s").Should(Equal(before))
			}).Should(Succeed(), "the agent settles after the removal")
			reconcilesBefore, requestsBefore := reconciles(Default), requests(Default)
			nodeWrites := 0
			rv := node.ResourceVersion
			countWrites := func(g Gomega) {
				n := &corev1.Node{}
				g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
				if n.ResourceVersion != rv {
					rv, nodeWrites = n.ResourceVersion, nodeWrites+1
				}
			}
			reg.Unregister()
			Eventually(func(g Gomega) map[string]int32 { countWrites(g); return drivers(g) }, time.Minute).Should(BeEmpty())
			Consistently(hasTaint(ctx, k8sClient, name, startupTaint.Key), "1s").Should(BeFalse(), "the agent never re-taints")
			reg = register(kubelet, driver)
			Eventually(drivers, time.Minute).Should(HaveKey(driverName))
			// Polled, so two writes between polls count once: at least one is certain.
			Eventually(func(g Gomega) int { countWrites(g); return nodeWrites }).Should(BeNumerically(">=", 1),
				"kubelet wrote its Node (the driver's node ID annotation)")
			By("kubelet renewing its Lease, its heartbeat")
			lease := &coordinationv1.Lease{}
			leaseKey := client.ObjectKey{Namespace: corev1.NamespaceNodeLease, Name: name}
			Eventually(func() error { return k8sClient.Get(ctx, leaseKey, lease) }, 30*time.Second).Should(Succeed())
			renewed := lease.Spec.RenewTime.DeepCopy()
			Eventually(func(g Gomega) *metav1.MicroTime {
				g.Expect(k8sClient.Get(ctx, leaseKey, lease)).To(Succeed())
				return lease.Spec.RenewTime
			}, 40*time.Second, time.Second).ShouldNot(Equal(renewed))
			Expect(requests(Default)).To(Equal(requestsBefore), "no request from the agent")
			GinkgoWriter.Printf("kubelet wrote its Node (seen %d times), its CSINode twice; the agent reconciled %v times and sent %v requests meanwhile\n",
				nodeWrites, reconciles(Default)-reconcilesBefore, requests(Default)-requestsBefore)
			Expect(reconciles(Default)-reconcilesBefore).To(BeNumerically("<=", 2),
				"the CSINode changes reconcile (one each); kubelet's Node writes do not")

			By("restarting kubelet")
			reg.Unregister()
			kubelet.Stop()
			kubelet = startKubelet(ctx, name)
			register(kubelet, driver)
			Eventually(drivers, time.Minute).Should(HaveKey(driverName))
			Consistently(hasTaint(ctx, k8sClient, name, startupTaint.Key), "1s").Should(BeFalse(),
				"kubelet registers its taints only when it creates the Node")
			Expect(agent).NotTo(gexec.Exit(), "the agent neither crashed nor stopped")
		})

	It("removes each driver's taint once kubelet has registered that driver, with one agent and a groups file", func(ctx SpecContext) {
		const name, fileDriverName = "e2e-kubelet-groups", "file.csi.example.com"
		fileTaint := corev1.Taint{Key: fileDriverName + "/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
		drivers := csiNodeDrivers(ctx, name)
		deleteNodeAfterSpec(name)
		kubelet := startKubelet(ctx, name, fileTaint)
		Expect(hasTaint(ctx, k8sClient, name, fileTaint.Key)(Default)).To(BeTrue(), "kubelet registered its Node with both taints")
		start := func(driver string) *fakecsi.Driver {
			GinkgoHelper()
			d, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driver, fakecsi.Ready)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(d.Stop)
			return d
		}
		disk, file := start(driverName), start(fileDriverName)
		config := filepath.Join(GinkgoT().TempDir(), "groups.yaml")
		Expect(os.WriteFile(config, []byte(fmt.Sprintf(`groups:
- name: disk
  taint: %s
  csi-address: %s
- name: file
  taint: %s
  csi-address: %s
`, startupTaint.Key+":"+string(startupTaint.Effect), disk.Path(), fileTaint.Key, file.Path())), 0o600)).To(Succeed())
		runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+name, "--config="+config,
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms")
		Consistently(func() bool {
			return hasTaint(ctx, k8sClient, name, startupTaint.Key)(Default) && hasTaint(ctx, k8sClient, name, fileTaint.Key)(Default)
		}, "2s").Should(BeTrue(), "both drivers are ready, but kubelet has registered neither")

		By("kubelet registering the file driver: its taint goes, the disk driver's stays")
		register(kubelet, file)
		Eventually(drivers, time.Minute).Should(HaveKey(fileDriverName))
		Eventually(hasTaint(ctx, k8sClient, name, fileTaint.Key)).Should(BeFalse())
		Consistently(hasTaint(ctx, k8sClient, name, startupTaint.Key), "1s").Should(BeTrue())

		By("kubelet registering the disk driver")
		register(kubelet, disk)
		Eventually(drivers, time.Minute).Should(HaveKey(driverName))
		Eventually(hasTaint(ctx, k8sClient, name, startupTaint.Key)).Should(BeFalse())
		Eventually(func(g Gomega) int {
			n, err := testkit.EventCount(ctx, k8sClient, name, "TaintRemoved")
			g.Expect(err).NotTo(HaveOccurred())
			return n
		}).Should(Equal(2), "one removal event per group")
	})

	It("waits for the attach limit kubelet publishes, with the driver registered before the agent starts", func(ctx SpecContext) {
		const name = "e2e-kubelet-allocatable"
		deleteNodeAfterSpec(name)
		drivers := csiNodeDrivers(ctx, name)
		kubelet := startKubelet(ctx, name)
		driver, reg := startRegisteredDriver(kubelet)
		Eventually(drivers, time.Minute).Should(HaveKeyWithValue(driverName, int32(-1)), "registered, no attach limit")

		runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+name, "--csi-address="+driver.Path(), "--require-allocatable",
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms")
		Consistently(hasTaint(ctx, k8sClient, name, startupTaint.Key), "2s").Should(BeTrue(), "no allocatable count yet")

		By("the driver publishing its attach limit, which kubelet writes when it registers it")
		reg.Unregister()
		Eventually(drivers, time.Minute).Should(BeEmpty())
		driver.SetMaxVolumes(25)
		register(kubelet, driver)
		Eventually(drivers, time.Minute).Should(HaveKeyWithValue(driverName, int32(25)))
		Eventually(hasTaint(ctx, k8sClient, name, startupTaint.Key)).Should(BeFalse())
	})

	It("in continuous mode, puts the taint back when kubelet unregisters the driver and takes it off after re-registration, "+
		"and its Node condition survives kubelet's status writes", func(ctx SpecContext) {
		const name = "e2e-kubelet-continuous"
		const conditionType = driverName + "/AgentReady"
		deleteNodeAfterSpec(name)
		drivers := csiNodeDrivers(ctx, name)
		kubelet := startKubelet(ctx, name)
		driver, reg := startRegisteredDriver(kubelet)
		runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+name, "--csi-address="+driver.Path(), "--taint="+startupTaint.Key+":"+string(startupTaint.Effect),
			"--retaint-after=2s", "--condition-type="+conditionType,
			"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms")
		back := corev1.Taint{Key: startupTaint.Key, Effect: corev1.TaintEffectNoSchedule}
		node := func(g Gomega) *corev1.Node {
			n := &corev1.Node{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
			return n
		}
		ours := func(status corev1.ConditionStatus, reason string) OmegaMatcher {
			return ContainElement(And(HaveField("Type", corev1.NodeConditionType(conditionType)),
				HaveField("Status", status), HaveField("Reason", reason)))
		}
		Eventually(func(g Gomega) {
			n := node(g)
			g.Expect(n.Spec.Taints).NotTo(ContainElement(HaveField("Key", startupTaint.Key)))
			g.Expect(n.Status.Conditions).To(ours(corev1.ConditionTrue, "GatesPass"))
		}, time.Minute).Should(Succeed())

		By("kubelet unregistering the driver: after the grace, the taint goes back on with NoSchedule")
		reg.Unregister()
		Eventually(drivers, time.Minute).Should(BeEmpty())
		unregistered := time.Now()
		Eventually(func(g Gomega) {
			n := node(g)
			g.Expect(n.Spec.Taints).To(ContainElement(back))
			g.Expect(n.Status.Conditions).To(ours(corev1.ConditionFalse, "CSINodeNotReady"))
		}).Should(Succeed())
		Expect(time.Since(unregistered)).To(BeNumerically(">=", time.Second), "not before the grace")
		Expect(node(Default).Spec.Taints).NotTo(ContainElement(startupTaint), "never NoExecute")

		By("restarting kubelet, which writes its own conditions: the agent's stays")
		kubelet.Stop()
		readyBefore := time.Now()
		kubelet = startKubelet(ctx, name)
		Eventually(func(g Gomega) time.Time {
			for _, c := range node(g).Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.LastHeartbeatTime.Time
				}
			}
			return time.Time{}
		}, time.Minute).Should(BeTemporally(">=", readyBefore.Truncate(time.Second)), "kubelet wrote its status")
		Expect(node(Default).Status.Conditions).To(ours(corev1.ConditionFalse, "CSINodeNotReady"))

		By("kubelet registering the driver again: the taint comes off after the hold time")
		register(kubelet, driver)
		Eventually(drivers, time.Minute).Should(HaveKey(driverName))
		registered := time.Now()
		Eventually(func(g Gomega) {
			n := node(g)
			g.Expect(n.Spec.Taints).NotTo(ContainElement(back))
			g.Expect(n.Status.Conditions).To(ours(corev1.ConditionTrue, "GatesPass"))
		}).Should(Succeed())
		Expect(time.Since(registered)).To(BeNumerically(">=", time.Second), "not before the hold time")
	})
})
