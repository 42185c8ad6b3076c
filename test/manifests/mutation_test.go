// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// A cluster's own mutation of every Node write (a policy engine that stamps the last writer) changes
// the agent's request after the agent sent it. The admission policy sees only the result, so it
// cannot tell that change from one the agent made, and refuses it; the agent, which sends no such
// change, recognises the refusal and says which step to look at.
var _ = Describe("another mutating admission step on Node updates", Ordered, func() {
	if !testkit.ServesMinor(startuptaint.TaintAtRegistrationMinor) {
		return // MutatingAdmissionPolicy is served from the minor that taint at registration needs
	}
	var a agent

	BeforeAll(func(ctx SpecContext) {
		objs := render("../../config/default")
		a = agentOf(objs)
		applyUntilDone(ctx, objs)
		// The API server picks a new policy up shortly after it is created; until then RBAC alone rules.
		probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mutated-probe", Labels: map[string]string{"zone": "a"}}}
		Expect(k8sClient.Create(ctx, probe)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, probe))).To(Succeed()) })
		refusedOnceLoaded(ctx, asAgentOn(a, "elsewhere"), probe.Name, func(n *corev1.Node) { n.Labels["zone"] = "b" },
			ContainSubstring(msgOtherNode))
		stamp := &admissionv1.MutatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "stamp-last-writer"},
			Spec: admissionv1.MutatingAdmissionPolicySpec{
				FailurePolicy:      ptr.To(admissionv1.Fail),
				ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Update},
						Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"nodes"}}}}}},
				MatchConditions: []admissionv1.MatchCondition{{Name: "these-nodes", Expression: "object.metadata.name.startsWith('mutated-')"}},
				Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: `Object{metadata: Object.metadata{annotations: {"example.com/last-writer": request.userInfo.username}}}`}}},
			},
		}
		Expect(k8sClient.Create(ctx, stamp)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, stamp)).To(Succeed()) })
		binding := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "stamp-last-writer"},
			Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: stamp.Name}}
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, binding)).To(Succeed()) })
	})

	It("makes the agent's removal fail, and the agent names the step and what it changed", func(ctx SpecContext) {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "mutated-1", Annotations: map[string]string{"note": "n"}}}
		for _, spec := range a.taints {
			node.Spec.Taints = append(node.Spec.Taints, startupTaint(spec))
		}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
		Eventually(func(g Gomega) {
			g.Expect(patchNode(ctx, k8sClient, node.Name, func(n *corev1.Node) { n.Labels = map[string]string{"touched": "yes"} })).To(Succeed())
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
			g.Expect(node.Annotations).To(HaveKey("example.com/last-writer"), "the stamp is on")
		}).Should(Succeed())

		startAgent(a.config(node.Name), node.Name, a.taints, controllers.NewConfinementCheck(false))
		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
			g.Expect(list.Items).To(ContainElement(And(
				HaveField("Reason", startuptaint.EventReasonRemovalRefused), HaveField("Regarding.Name", node.Name),
				HaveField("Note", And(ContainSubstring("mutating admission steps on Node updates"),
					ContainSubstring("changed annotations example.com/last-writer on the way"))))))
		}).Should(Succeed(), "the agent's warning names the step and the annotation it stamped")
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
		Expect(startuptaint.MatchingTaints(node.Spec.Taints, a.taints)).NotTo(BeEmpty(), "the policy refused the removal")
	})
})
