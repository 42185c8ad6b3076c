// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// conditionsOnlyInstalls run the agent in conditions-only mode, with node-readiness-controller's
// readiness.k8s.io/ names: it writes its condition, and another controller removes the taint.
var conditionsOnlyInstalls = []install{
	{name: "the node-readiness-controller recipe", dir: "../../config/samples/node-readiness-controller"},
	{name: "the Helm chart in conditions-only mode", dir: chartDir,
		chart: &chartRelease{name: "nrc", namespace: "nrc", values: []string{"testdata/conditions-only-values.yaml"}}},
}

// allInstalls are every install the tests render: each way the README installs the agent.
func allInstalls() []install {
	return slices.Concat(installs, registrationInstalls, conditionsOnlyInstalls)
}

// msgConditionsOnly is the policy's refusal of any write but the agent's conditions in
// conditions-only mode.
var msgConditionsOnly = tagged(startuptaint.RefusalConditionsOnly)

var _ = Describe("conditions-only installs", func() {
	samePolicy := policyRenderLabels(conditionsOnlyInstalls)
	for i, in := range conditionsOnlyInstalls {
		Context(in.name, Ordered, samePolicy[i], func() {
			var (
				objs []*unstructured.Unstructured
				a    agent
				seq  int
			)
			prefix := fmt.Sprintf("conditions%d", i)
			newNode := func(ctx SpecContext) string {
				GinkgoHelper()
				seq++
				name := fmt.Sprintf("%s-node-%d", prefix, seq)
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "a"}},
					Spec: corev1.NodeSpec{Taints: []corev1.Taint{startupTaint(a.taints[0])}}}
				Expect(k8sClient.Create(ctx, node)).To(Succeed())
				DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
				return name
			}
			removeStartup := func(n *corev1.Node) { n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, a.taints) }

			BeforeAll(func(ctx SpecContext) {
				objs = in.render()
				a = agentOf(objs)
				Expect(a.taintList).To(HavePrefix("readiness.k8s.io/"))
				Expect(a.conditionType).To(HavePrefix("readiness.k8s.io/"))
				apply(ctx, objs)
				DeferCleanup(func(ctx SpecContext) {
					for _, obj := range objs {
						Expect(deleteObject(ctx, obj)).To(Succeed())
					}
				})
				// In force once the agent, holding a role that grants nodes patch as a driver's
				// chart might, is refused by the policy.
				bindRole(ctx, nodesRole(ctx, prefix+"-driver-own-role"), a.namespace, a.serviceAccount)
				own := newNode(ctx)
				refusedOnceLoaded(ctx, asAgentOn(a, own), own, removeStartup, ContainSubstring(msgConditionsOnly))
			})

			It("runs the agent with --conditions-only, and grants it nodes/status but no nodes patch", func() {
				Expect(agentArgs(objs)).To(ContainElement("--conditions-only"))
				var role *rbacv1.ClusterRole
				for _, r := range only[rbacv1.ClusterRole](objs, "ClusterRole") {
					if slices.ContainsFunc(r.Rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Resources, "startuptaints") }) {
						role = r
					}
				}
				Expect(role).NotTo(BeNil())
				for _, rule := range role.Rules {
					switch {
					case slices.Contains(rule.Resources, "nodes"):
						Expect(rule.Verbs).To(ConsistOf("get", "list", "watch"))
					case slices.Contains(rule.Resources, "nodes/status"):
						Expect(rule.Verbs).To(ConsistOf("patch"))
					case slices.Contains(rule.Resources, "startuptaints"):
						Expect(rule.Verbs).To(ConsistOf("report"), "the grant of a conditions-only agent, which no remover holds")
					}
				}
				policies := only[admissionv1.ValidatingAdmissionPolicy](objs, "ValidatingAdmissionPolicy")
				Expect(policies).To(ContainElement(HaveField("Spec.Variables", ContainElement(And(
					HaveField("Name", "conditionsOnly"), HaveField("Expression", "true"))))))
				for _, p := range policies {
					for _, m := range p.Spec.MatchConditions {
						if strings.Contains(m.Expression, "authorizer") {
							Expect(m.Expression).To(And(ContainSubstring("check('report')"), Not(ContainSubstring("check('remove')"))), p.Name)
						}
					}
				}
			})

			It("lets the agent write its own condition, and refuses it every spec and metadata change with the policy's message", func(ctx SpecContext) {
				own := newNode(ctx)
				Expect(writeStatus(ctx, asAgentOn(a, own), own, func(n *corev1.Node) {
					n.Status.Conditions = append(n.Status.Conditions, condition(a.ownCondition(), corev1.ConditionTrue))
				})).To(Succeed())
				for what, change := range map[string]func(*corev1.Node){
					"removing its taint": removeStartup,
					"adding a taint": func(n *corev1.Node) {
						n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "x", Effect: "NoSchedule"})
					},
					"labelling the Node":       func(n *corev1.Node) { n.Labels["zone"] = "b" },
					"cordoning the Node":       func(n *corev1.Node) { n.Spec.Unschedulable = true },
					"writing a removed record": func(n *corev1.Node) { n.Annotations = map[string]string{startuptaint.RemovedAnnotation: a.taintList} },
				} {
					Expect(patchNode(ctx, asAgentOn(a, own), own, change)).To(MatchError(ContainSubstring(msgConditionsOnly)), what)
				}
				Expect(writeStatus(ctx, asAgentOn(a, own), own, func(n *corev1.Node) {
					n.Status.Conditions = append(n.Status.Conditions, condition("example.com/Other", corev1.ConditionTrue))
				})).To(MatchError(ContainSubstring(a.msgStatus())), "only its own condition")
				for what, change := range map[string]func(*corev1.NodeCondition){
					"the status Maybe":       func(c *corev1.NodeCondition) { c.Status = "Maybe" },
					"a status of 1.5 MB":     func(c *corev1.NodeCondition) { c.Status = corev1.ConditionStatus(strings.Repeat("T", 1571200)) },
					"a transition in 9999":   func(c *corev1.NodeCondition) { c.LastTransitionTime = metav1.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC) },
					"a reason of 1025 bytes": func(c *corev1.NodeCondition) { c.Reason = strings.Repeat("R", 1025) },
				} {
					Expect(writeStatus(ctx, asAgentOn(a, own), own, func(n *corev1.Node) {
						n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return string(c.Type) == a.ownCondition() })
						c := condition(a.ownCondition(), corev1.ConditionTrue)
						change(&c)
						n.Status.Conditions = append(n.Status.Conditions, c)
					})).To(MatchError(ContainSubstring(msgCondition)), "its own condition with %s", what)
				}
			})

			It("lets the real controller publish the condition as its gate goes, never touching the taint, and be ready", func(ctx SpecContext) {
				own := newNode(ctx)
				gate := &testkit.Switch{}
				gate.Set(false)
				metrics.Default().RemovalRefused.Set(1)
				metrics.Default().Confined.Set(0)
				// Required, as the binary's default: the condition is written only once the policy
				// refuses the check's condition that is not the agent's own.
				confinement := controllers.NewConfinementCheck(true)
				startAgent(a.config(own), own, a.taints, confinement, func(r *controllers.NodeReconciler) {
					r.ConditionsOnly = true
					r.Groups[0].ConditionType = a.conditionType
					r.Groups[0].Gates = []gates.Gate{gate}
				})
				status := func(g Gomega) corev1.ConditionStatus {
					node := &corev1.Node{}
					g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: own}, node)).To(Succeed())
					for _, c := range node.Status.Conditions {
						if string(c.Type) == a.conditionType {
							return c.Status
						}
					}
					return ""
				}
				Eventually(status).Should(Equal(corev1.ConditionFalse))
				Expect(testutil.ToFloat64(metrics.Default().Confined)).To(Equal(1.0), "the policy refuses a condition not its own")
				Eventually(func() float64 { return testutil.ToFloat64(metrics.Default().RemovalRefused) }).Should(BeZero(),
					"its dry-run condition write is admitted: it is ready")
				gate.Set(true)
				Eventually(status).Should(Equal(corev1.ConditionTrue))
				Consistently(func(g Gomega) []corev1.Taint {
					node := &corev1.Node{}
					g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: own}, node)).To(Succeed())
					return node.Spec.Taints
				}, time.Second).Should(ContainElement(startupTaint(a.taints[0])))
			})

			It("never blocks a kubelet's or an admin's Node writes with any one of its objects deleted", func(ctx SpecContext) {
				for j, obj := range objs {
					if obj.GetKind() == "Namespace" || !served(obj) {
						continue
					}
					Expect(k8sClient.Delete(ctx, obj.DeepCopy())).To(Succeed())
					nodeWritesWork(ctx, fmt.Sprintf("%s-without-%d", prefix, j))
					Expect(k8sClient.Create(ctx, obj.DeepCopy())).To(Succeed())
				}
			})

			It("uninstalls without ever blocking Node writes, and then judges no one", func(ctx SpecContext) {
				uninstall(ctx, objs, prefix+"-uninstall")
				own := newNode(ctx)
				Eventually(func() error { return patchNode(ctx, asAgentOn(a, own), own, removeStartup) }).Should(Succeed(),
					"with only the driver's own role left, nothing judges the account")
			})
		})
	}
})

// agentArgs are the arguments of the startup-taint-remover container of objs.
func agentArgs(objs []*unstructured.Unstructured) []string {
	GinkgoHelper()
	for _, ds := range only[appsv1.DaemonSet](objs, "DaemonSet") {
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name == "startup-taint-remover" {
				return c.Args
			}
		}
	}
	Fail("no startup-taint-remover container")
	return nil
}
