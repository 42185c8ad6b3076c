// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

var _ = Describe("Several drivers on one node (Groups)", func() {
	It("removes each driver's taint when its own gates pass, in one agent, while another writer races", func(ctx SpecContext) {
		const disk, file = "disk.csi.example.com", "file.csi.example.com"
		diskTaint := corev1.Taint{Key: disk + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
		fileTaint := corev1.Taint{Key: file + "/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
		nodeName := uniqueNodeName()
		createNode(ctx, nodeName, diskTaint, fileTaint)

		start := func(name string, r fakecsi.Readiness) *fakecsi.Driver {
			GinkgoHelper()
			d, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), name, r)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(d.Stop)
			return d
		}
		diskDriver, fileDriver := start(disk, fakecsi.NotReady), start(file, fakecsi.Ready)
		// Kubelet has registered the file driver only.
		csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: nodeName},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: file, NodeID: nodeName}}}}
		Expect(k8sClient.Create(ctx, csiNode)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, csiNode))).To(Succeed()) })

		By("a writer that changes the Node's labels and its own taint all along")
		var stop atomic.Bool
		var wg sync.WaitGroup
		var writes atomic.Int64
		own := corev1.Taint{Key: "writer.example.com/" + nodeName, Effect: corev1.TaintEffectNoSchedule}
		var last struct {
			label string
			taint bool
		}
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				label, taint := fmt.Sprint(i), i%2 == 0
				Expect(testkit.UpdateNode(ctx, k8sClient, nodeName, func(node *corev1.Node) {
					if node.Labels == nil {
						node.Labels = map[string]string{}
					}
					node.Labels["writer.example.com/seq"] = label
					node.Spec.Taints = startuptaint.WithoutTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: own.Key}})
					if taint {
						node.Spec.Taints = append(node.Spec.Taints, own)
					}
				})).To(Succeed())
				last.label, last.taint = label, taint
				writes.Add(1)
			}
		}()
		stopWriter := func() {
			stop.Store(true)
			wg.Wait()
		}
		DeferCleanup(stopWriter)

		startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{
			{Name: "disk", Taints: []startuptaint.TaintSpec{{Key: diskTaint.Key}}, Gates: controllers.CSIDriverGroup(nodeName, csiGate(diskDriver.Path())).Gates},
			{Name: "file", Taints: []startuptaint.TaintSpec{{Key: fileTaint.Key}}, Gates: controllers.CSIDriverGroup(nodeName, csiGate(fileDriver.Path())).Gates},
		}})

		By("the file driver, ready and registered: its taint goes, the disk driver's stays")
		Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).NotTo(hasTaintKey(fileTaint.Key)) }).WithContext(ctx).Should(Succeed())
		Consistently(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(ContainElement(diskTaint)) }, "1s").WithContext(ctx).Should(Succeed())
		Expect(testutil.ToFloat64(metrics.Default().GateReady.WithLabelValues("disk/csi"))).To(Equal(0.0))
		Expect(testutil.ToFloat64(metrics.Default().GateReady.WithLabelValues("file/csinode"))).To(Equal(1.0))
		Eventually(func(g Gomega) []string {
			notes, err := testkit.EventNotes(ctx, k8sClient, nodeName, startuptaint.EventReasonWaitingForDriver)
			g.Expect(err).NotTo(HaveOccurred())
			return notes
		}).WithContext(ctx).Should(ContainElement(HavePrefix("Holding startup taints: csi gate of group disk: ")), "each group's wait names its group")

		By("the disk driver turning ready, then kubelet registering it")
		diskDriver.SetReadiness(fakecsi.Ready)
		Consistently(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(ContainElement(diskTaint)) }, "500ms").WithContext(ctx).Should(Succeed())
		Expect(retry.RetryOnConflict(testkit.PatientRetry, func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(csiNode), csiNode); err != nil {
				return err
			}
			csiNode.Spec.Drivers = append(csiNode.Spec.Drivers, storagev1.CSINodeDriver{Name: disk, NodeID: nodeName})
			return k8sClient.Update(ctx, csiNode)
		})).To(Succeed())
		Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).NotTo(hasTaintKey(diskTaint.Key)) }).WithContext(ctx).Should(Succeed())

		By("the writer's last write is on the Node, and each group reported its own removal")
		stopWriter()
		Expect(writes.Load()).To(BeNumerically(">", 10), "the writer raced the removals")
		node := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: nodeName}, node)).To(Succeed())
		Expect(node.Labels).To(HaveKeyWithValue("writer.example.com/seq", last.label))
		if last.taint {
			Expect(node.Spec.Taints).To(ContainElement(own))
		} else {
			Expect(node.Spec.Taints).NotTo(hasTaintKey(own.Key))
		}
		Expect(node.Annotations).To(HaveKeyWithValue(startuptaint.RemovedAnnotation, fileTaint.Key+","+diskTaint.Key), "in the order they went")
		Eventually(func(g Gomega) int { return eventOccurrences(g, ctx, nodeName, startuptaint.EventReasonTaintRemoved) }).Should(Equal(2))
		AddReportEntry("groups race", fmt.Sprintf("%d writes by the racing writer", writes.Load()))
	})
})
