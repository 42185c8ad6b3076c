// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

var _ = Describe("NodeReconciler", func() {
	var (
		nodeName string
		other    corev1.Taint
	)

	BeforeEach(func() {
		nodeName = uniqueNodeName()
		other = corev1.Taint{Key: "example.com/other", Value: "keep", Effect: corev1.TaintEffectNoSchedule}
	})

	expectTaintStays := func(ctx context.Context) {
		GinkgoHelper()
		Consistently(func(g Gomega) {
			g.Expect(nodeTaints(g, ctx, nodeName)).To(hasTaintKey(startupTaint.Key))
		}).WithContext(ctx).Should(Succeed())
	}
	expectTaintGone := func(ctx context.Context) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			g.Expect(nodeTaints(g, ctx, nodeName)).NotTo(hasTaintKey(startupTaint.Key))
		}).WithContext(ctx).Should(Succeed())
	}

	Context("with a CSI driver and CSINode registration", func() {
		var driver *fakecsi.Driver

		startFor := func(readiness fakecsi.Readiness, mutate ...func(*controllers.NodeReconciler)) {
			driver = startDriver(readiness)
			r := &controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{controllers.CSIDriverGroup(nodeName, csiGate(driver.Path()))}}
			for _, m := range mutate {
				m(r)
			}
			startManager(r)
		}

		It("keeps the taint while the driver is not ready, even when registered", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint, other)
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.NotReady)
			Eventually(driver.Probes).Should(BeNumerically(">", 2))
			expectTaintStays(ctx)

			driver.SetReadiness(fakecsi.Failing)
			expectTaintStays(ctx)

			driver.SetReadiness(fakecsi.Ready)
			expectTaintGone(ctx)
		})

		It("keeps the taint while the driver is ready but not in CSINode, and removes it once registered", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint, other)
			startFor(fakecsi.Ready)
			Eventually(driver.Probes).Should(BeNumerically(">", 2))
			expectTaintStays(ctx)

			registerDriver(ctx, nodeName, nil)
			expectTaintGone(ctx)
		})

		It("probes at once, not at the next tick, when kubelet registers a driver that turned ready meanwhile", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint)
			startFor(fakecsi.NotReady, func(r *controllers.NodeReconciler) { r.ProbeInterval = time.Hour })
			Eventually(driver.Probes).Should(BeNumerically(">=", 1))
			driver.SetReadiness(fakecsi.Ready)
			registerDriver(ctx, nodeName, nil)
			// Within the default timeout, far below the hour the next tick would take.
			expectTaintGone(ctx)
		})

		It("with a maximum wait, holds the taint until the deadline, then removes it although the driver is not ready", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint, other)
			registerDriver(ctx, nodeName, nil)
			created := time.Now()
			startFor(fakecsi.NotReady, func(r *controllers.NodeReconciler) { r.MaxWait = 3 * time.Second })
			Consistently(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).To(hasTaintKey(startupTaint.Key)) }, "1500ms").
				WithContext(ctx).Should(Succeed())
			expectTaintGone(ctx)
			// The deadline counts from creationTimestamp, which has whole seconds.
			Expect(time.Since(created)).To(BeNumerically(">=", 2*time.Second))
			Expect(nodeTaints(Default, ctx, nodeName)).To(ContainElement(other))
			Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonTaintRemovedUnready))
		})

		It("reads an unset ready field as ready", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint)
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.ReadyUnset)
			expectTaintGone(ctx)
		})

		It("waits for the allocatable count when asked to", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint)
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.Ready, func(r *controllers.NodeReconciler) {
				csi := r.Groups[0].Gates[0].(*gates.CSIGate)
				r.Groups[0].Gates[1] = gates.NewCSINodeGate(nodeName, csi, true)
			})
			Eventually(driver.Probes).Should(BeNumerically(">", 2))
			expectTaintStays(ctx)

			registerDriver(ctx, nodeName, ptr.To[int32](25))
			expectTaintGone(ctx)
		})

		It("leaves other taints, labels and annotations alone", func(ctx SpecContext) {
			node := createNode(ctx, nodeName, startupTaint, other,
				corev1.Taint{Key: driverName + "/another", Effect: corev1.TaintEffectNoSchedule})
			node.Labels = map[string]string{"topology.example.com/zone": "a"}
			node.Annotations = map[string]string{"example.com/note": "hello"}
			Expect(k8sClient.Update(ctx, node)).To(Succeed())
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.Ready)

			expectTaintGone(ctx)
			Eventually(func(g Gomega) {
				g.Expect(nodeTaints(g, ctx, nodeName)).To(ConsistOf(
					other, corev1.Taint{Key: driverName + "/another", Effect: corev1.TaintEffectNoSchedule}))
			}).Should(Succeed())
			got := &corev1.Node{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: nodeName}, got)).To(Succeed())
			Expect(got.Labels).To(HaveKeyWithValue("topology.example.com/zone", "a"))
			Expect(got.Annotations).To(HaveKeyWithValue("example.com/note", "hello"))
		})

		It("removes the taint again when it is re-added later", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint)
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.Ready)
			expectTaintGone(ctx)

			for range 3 {
				readdTaint(ctx, nodeName, startupTaint)
				expectTaintGone(ctx)
			}
		})

		It("finds a socket that appears after the start, leaving the embedder's struct as it was set", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint)
			registerDriver(ctx, nodeName, nil)
			path := filepath.Join(GinkgoT().TempDir(), "csi.sock")
			check := &controllers.ConfinementCheck{}
			r := &controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{controllers.CSIDriverGroup(nodeName, csiGate(path))},
				Confinement: check}
			startManager(r)
			// The manager's client, recorder and the real clock are used, not written into r.
			Expect(r.Client).To(BeNil())
			Expect(r.APIReader).To(BeNil())
			Expect(r.Recorder).To(BeNil())
			Expect(r.Clock).To(BeNil())
			Expect(check.Client).To(BeNil())
			Expect(check.NodeName).To(BeEmpty())
			expectTaintStays(ctx)

			d, err := fakecsi.Start(path, driverName, fakecsi.Ready)
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(d.Stop)
			expectTaintGone(ctx)
		})

		It("treats a hung Probe as not ready and recovers when the driver answers", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint)
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.Hung)
			Eventually(driver.Probes).Should(BeNumerically(">", 1))
			expectTaintStays(ctx)

			driver.SetReadiness(fakecsi.Ready)
			expectTaintGone(ctx)
		})

		It("finds a driver that restarted on a new socket file", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint)
			startFor(fakecsi.Ready)
			driver.Stop()
			registerDriver(ctx, nodeName, nil)
			expectTaintStays(ctx)

			Expect(driver.Restart()).To(Succeed())
			expectTaintGone(ctx)
		})

		It("removes the taint from a node deleted and re-created under the same name", func(ctx SpecContext) {
			node := createNode(ctx, nodeName, startupTaint)
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.Ready)
			expectTaintGone(ctx)

			Expect(k8sClient.Delete(ctx, node)).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(k8sClient.Get(ctx, client.ObjectKey{Name: nodeName}, &corev1.Node{}))
			}).Should(BeTrue())
			createNode(ctx, nodeName, startupTaint, other)
			expectTaintGone(ctx)
			Eventually(func(g Gomega) {
				g.Expect(nodeTaints(g, ctx, nodeName)).To(hasTaintKey(other.Key))
			}).Should(Succeed())
		})

		It("matches an effect only when the spec names one", func(ctx SpecContext) {
			noSchedule := corev1.Taint{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
			noExecute := corev1.Taint{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}
			createNode(ctx, nodeName, noSchedule, noExecute)
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.Ready, func(r *controllers.NodeReconciler) {
				r.Groups[0].Taints = []startuptaint.TaintSpec{{Key: noExecute.Key, Effect: corev1.TaintEffectNoExecute}}
			})
			Eventually(func(g Gomega) {
				g.Expect(nodeTaints(g, ctx, nodeName)).To(ConsistOf(noSchedule))
			}).Should(Succeed())
		})

		It("loses no other writer's taint while it removes its own", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint)
			registerDriver(ctx, nodeName, nil)
			startFor(fakecsi.Ready)

			// Another writer toggles its own taints hundreds of times while this test re-adds the
			// startup taint again and again; every write of each side must survive.
			const writes = 300
			var wg sync.WaitGroup
			var readds atomic.Int64
			writerState := map[string]bool{}
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for i := range writes {
					key := fmt.Sprintf("writer.example.com/t%d", i%7)
					Expect(testkit.UpdateNode(ctx, k8sClient, nodeName, func(node *corev1.Node) {
						if writerState[key] {
							node.Spec.Taints = startuptaint.WithoutTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: key}})
						} else {
							node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
						}
					})).To(Succeed())
					writerState[key] = !writerState[key]
				}
			}()
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for range 30 {
					Expect(testkit.UpdateNode(ctx, k8sClient, nodeName, func(node *corev1.Node) {
						if len(startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}})) == 0 {
							node.Spec.Taints = append(node.Spec.Taints, startupTaint)
						}
					})).To(Succeed())
					readds.Add(1)
					time.Sleep(20 * time.Millisecond)
				}
			}()
			wg.Wait()

			expectTaintGone(ctx)
			var want []string
			for key, present := range writerState {
				if present {
					want = append(want, key)
				}
			}
			Expect(want).NotTo(BeEmpty())
			Eventually(func(g Gomega) {
				keys := make([]string, 0, len(writerState))
				for _, t := range nodeTaints(g, ctx, nodeName) {
					keys = append(keys, t.Key)
				}
				g.Expect(keys).To(ConsistOf(want))
			}).Should(Succeed())
			GinkgoWriter.Printf("other writer: %d writes, startup taint re-added %d times\n", writes, readds.Load())
		})
	})

	Context("with the readiness of a container of the agent's own Pod", func() {
		It("holds the taint while kubelet reports the container not ready, and removes it once ready", func(ctx SpecContext) {
			createNode(ctx, nodeName, startupTaint, other)
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "agent-" + nodeName, Namespace: "default"},
				Spec: corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{
					{Name: "driver", Image: "example.com/driver"}, {Name: "startup-taint-remover", Image: "example.com/agent"}}},
			}
			Expect(k8sClient.Create(ctx, pod)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod))).To(Succeed()) })
			setReady := func(ready bool) {
				GinkgoHelper()
				Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(pod), pod)).To(Succeed())
				pod.Status.ContainerStatuses = []corev1.ContainerStatus{
					{Name: "driver", Ready: ready, Image: "example.com/driver", ImageID: "x"},
					{Name: "startup-taint-remover", Ready: true, Image: "example.com/agent", ImageID: "y"},
				}
				Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
			}
			setReady(false)
			startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{{
				Taints: []startuptaint.TaintSpec{{Key: startupTaint.Key}},
				Gates:  []gates.Gate{gates.NewContainerGate(nodeName, client.ObjectKeyFromObject(pod), "driver")},
			}}})
			expectTaintStays(ctx)

			setReady(true)
			expectTaintGone(ctx)
			Expect(nodeTaints(Default, ctx, nodeName)).To(ContainElement(other))
		})
	})

	Context("with an HTTP health endpoint", func() {
		It("removes the taint once the endpoint answers 2xx", func(ctx SpecContext) {
			var healthy atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				if healthy.Load() {
					w.WriteHeader(http.StatusNoContent)
					return
				}
				http.Error(w, "starting", http.StatusServiceUnavailable)
			}))
			DeferCleanup(srv.Close)
			cniTaint := corev1.Taint{Key: "cni.example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
			createNode(ctx, nodeName, cniTaint, other)
			startManager(&controllers.NodeReconciler{
				NodeName: nodeName,
				Groups: []controllers.Group{{
					Taints: []startuptaint.TaintSpec{{Key: cniTaint.Key}},
					Gates:  []gates.Gate{gates.NewHTTPGate(srv.URL+"/healthz", time.Second)},
				}},
			})
			Consistently(func(g Gomega) {
				g.Expect(nodeTaints(g, ctx, nodeName)).To(hasTaintKey(cniTaint.Key))
			}).Should(Succeed())

			healthy.Store(true)
			Eventually(func(g Gomega) {
				g.Expect(nodeTaints(g, ctx, nodeName)).To(ConsistOf(other))
			}).Should(Succeed())
		})
	})
})
