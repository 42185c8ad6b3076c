// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers_test

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// logLines collects what a logger writes, for specs that count log lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

var _ = Describe("Reliability", func() {
	var nodeName string
	BeforeEach(func() { nodeName = uniqueNodeName() })

	It("reports a forbidden patch once, backs off, and removes the taint once the permission is granted", func(ctx SpecContext) {
		taint := corev1.Taint{Key: "forbidden.example.com/" + nodeName, Effect: corev1.TaintEffectNoSchedule}
		key := taint.Key
		createNode(ctx, nodeName, taint)

		By("running the controller as an identity that may read Nodes but not patch them")
		role := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "limited-" + nodeName},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
			},
		}
		Expect(k8sClient.Create(ctx, role)).To(Succeed())
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "limited-" + nodeName},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "limited-agent"}},
		}
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, binding))).To(Succeed())
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, role))).To(Succeed())
		})
		limited := rest.CopyConfig(cfg)
		limited.Impersonate = rest.ImpersonationConfig{UserName: "limited-agent", Groups: []string{"system:authenticated"}}
		logs := &logLines{}
		startManagerAs(limited, funcr.New(logs.add, funcr.Options{}), &controllers.NodeReconciler{
			NodeName: nodeName,
			Groups:   []controllers.Group{{Taints: []startuptaint.TaintSpec{{Key: key}}, Gates: []gates.Gate{testkit.AlwaysReady{}}}},
		})

		Eventually(func() float64 {
			return testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(key, metrics.ResultForbidden))
		}).Should(BeNumerically(">=", 3), "retried")
		Eventually(func(g Gomega) []string { return nodeEvents(g, ctx, nodeName) }).Should(ContainElement(startuptaint.EventReasonRemovalFailed))
		Expect(logs.count("not allowed to remove startup taints")).To(Equal(1), "one clear error, not one per retry")
		Expect(logs.count("Reconciler error")).To(BeZero())
		Expect(nodeTaints(Default, ctx, nodeName)).To(ContainElement(taint))

		By("granting the permission")
		Expect(retry.RetryOnConflict(testkit.PatientRetry, func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(role), role); err != nil {
				return err
			}
			role.Rules[0].Verbs = append(role.Rules[0].Verbs, "patch")
			return k8sClient.Update(ctx, role)
		})).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(nodeTaints(g, ctx, nodeName)).NotTo(ContainElement(taint))
		}, time.Minute).Should(Succeed())
		Expect(testutil.ToFloat64(metrics.Default().Removals.WithLabelValues(key, metrics.ResultRemoved))).To(Equal(1.0))
	})

	It("keeps every other writer's last write while two agents and many writers race on one Node", func(ctx SpecContext) {
		createNode(ctx, nodeName, startupTaint)
		registerDriver(ctx, nodeName, nil)
		// Two agents on the same node, as when a sidecar and a DaemonSet both run.
		for range 2 {
			driver := startDriver(fakecsi.Ready)
			startManager(&controllers.NodeReconciler{NodeName: nodeName, Groups: []controllers.Group{controllers.CSIDriverGroup(nodeName, csiGate(driver.Path()))}})
		}
		Eventually(func(g Gomega) { g.Expect(nodeTaints(g, ctx, nodeName)).NotTo(hasTaintKey(startupTaint.Key)) }).Should(Succeed())

		const writers, writesEach, readds = 3, 700, 100
		type state struct {
			taints      map[string]bool
			labels      map[string]string
			annotations map[string]string
		}
		finals := make([]state, writers)
		var writes, conflicts atomic.Int64
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				st := state{taints: map[string]bool{}, labels: map[string]string{}, annotations: map[string]string{}}
				for i := range writesEach {
					key := fmt.Sprintf("w%d.example.com/k%d", w, i%5)
					Expect(retry.RetryOnConflict(testkit.PatientRetry, func() error {
						err := testkit.PatchNode(ctx, k8sClient, k8sClient, nodeName, func(node *corev1.Node) {
							switch i % 3 {
							case 0:
								if st.taints[key] {
									node.Spec.Taints = startuptaint.WithoutTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: key}})
								} else {
									node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule})
								}
							case 1:
								if node.Labels == nil {
									node.Labels = map[string]string{}
								}
								node.Labels[key] = fmt.Sprint(i)
							case 2:
								if node.Annotations == nil {
									node.Annotations = map[string]string{}
								}
								node.Annotations[key] = fmt.Sprint(i)
							}
						})
						if err != nil {
							conflicts.Add(1)
						}
						return err
					})).To(Succeed())
					writes.Add(1)
					switch i % 3 {
					case 0:
						st.taints[key] = !st.taints[key]
					case 1:
						st.labels[key] = fmt.Sprint(i)
					case 2:
						st.annotations[key] = fmt.Sprint(i)
					}
				}
				finals[w] = st
			}()
		}
		var readded atomic.Int64
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			for range readds {
				Expect(testkit.UpdateNode(ctx, k8sClient, nodeName, func(node *corev1.Node) {
					node.Spec.Taints = append(startuptaint.WithoutTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: startupTaint.Key}}), startupTaint)
				})).To(Succeed())
				readded.Add(1)
				time.Sleep(10 * time.Millisecond)
			}
		}()
		wg.Wait()

		Eventually(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: nodeName}, node)).To(Succeed())
			g.Expect(node.Spec.Taints).NotTo(hasTaintKey(startupTaint.Key))
			for _, st := range finals {
				for key, present := range st.taints {
					if present {
						g.Expect(node.Spec.Taints).To(hasTaintKey(key))
					} else {
						g.Expect(node.Spec.Taints).NotTo(hasTaintKey(key))
					}
				}
				for key, value := range st.labels {
					g.Expect(node.Labels).To(HaveKeyWithValue(key, value))
				}
				for key, value := range st.annotations {
					g.Expect(node.Annotations).To(HaveKeyWithValue(key, value))
				}
			}
		}).Should(Succeed())
		GinkgoWriter.Printf("race: %d writes by %d writers (%d conflicts retried), startup taint re-added %d times, removed by 2 agents; nothing lost\n",
			writes.Load(), writers, conflicts.Load(), readded.Load())
		AddReportEntry("race", fmt.Sprintf("%d writes, %d conflicts, %d re-adds", writes.Load(), conflicts.Load(), readded.Load()))
	})
})
