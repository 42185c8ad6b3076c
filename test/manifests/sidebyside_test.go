// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// sideBySide are the recipes the README offers, each a separate install: config/default, the
// standalone samples, and the sidecar recipes of three drivers.
var sideBySide = []string{
	"../../config/default",
	"../../config/samples/cilium",
	"../../config/samples/ebs-efs",
	"../../config/samples/ebs-sidecar",
	"../../config/samples/efs-sidecar",
	"../../config/samples/azuredisk-sidecar",
	// The same taint, removed by one agent and reported on by the other (conditions-only): each is
	// judged by its own policy only.
	"../../config/samples/karpenter-readiness",
	"../../config/samples/node-readiness-controller",
}

// kubectl runs kubectl (KUBECTL, as the Makefile names it, or the one on PATH) as an admin.
func kubectl(args ...string) (string, error) {
	bin := os.Getenv("KUBECTL")
	if bin == "" {
		bin = "kubectl"
	}
	out, err := exec.Command(bin, append([]string{"--kubeconfig=" + kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

var _ = Describe("every recipe installed side by side with kubectl apply -k", Ordered, func() {
	agents := map[string]agent{}
	// policies names each recipe's own-node-only policy.
	policies := map[string]string{}
	// conditionsOnly marks the recipes whose agent only reports conditions.
	conditionsOnly := map[string]bool{}

	BeforeAll(func(ctx SpecContext) {
		for _, dir := range sideBySide {
			objs := render(dir)
			agents[dir] = agentOf(objs)
			conditionsOnly[dir] = slices.Contains(agentArgs(objs), "--conditions-only")
			for _, obj := range objs {
				if obj.GetKind() == "ValidatingAdmissionPolicy" && strings.Contains(obj.GetName(), "own-node-only") {
					policies[dir] = obj.GetName()
				}
			}
			out, err := kubectl("apply", "-k", dir)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).NotTo(ContainSubstring(" configured"), "%s changed another recipe's object:\n%s", dir, out)
			GinkgoWriter.Printf("kubectl apply -k %s\n%s", dir, out)
		}
		DeferCleanup(func(ctx SpecContext) {
			for _, dir := range sideBySide {
				_, err := kubectl("delete", "--ignore-not-found", "--wait=false", "-k", dir)
				Expect(err).NotTo(HaveOccurred())
			}
			for _, dir := range sideBySide {
				for _, obj := range render(dir) {
					if obj.GetKind() == "Namespace" {
						finalizeNamespace(ctx, obj.GetName())
					}
				}
			}
		})
	})

	// works checks that the agent of the recipe in dir still holds its grants, that its own
	// removal on its own Node is admitted, and that a forbidden change is refused by its own policy.
	works := func(ctx context.Context, dir string) {
		GinkgoHelper()
		a := agents[dir]
		By(dir)
		grants := []authorizationv1.ResourceAttributes{
			{Verb: "patch", Resource: "nodes"},
			{Verb: "remove", Group: "startup-taint-remover.github.io", Resource: "startuptaints", Name: a.taintList},
		}
		refusal := msgMetadata
		if conditionsOnly[dir] {
			grants = []authorizationv1.ResourceAttributes{
				{Verb: "patch", Resource: "nodes", Subresource: "status"},
				{Verb: "report", Group: "startup-taint-remover.github.io", Resource: "startuptaints", Name: a.taintList},
			}
			refusal = a.msgStatus()
		}
		for _, can := range grants {
			review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: a.user, Groups: a.groups, ResourceAttributes: &can}}
			Expect(k8sClient.Create(ctx, review)).To(Succeed())
			Expect(review.Status.Allowed).To(BeTrue(), "%s: its agent may %s %s %s", dir, can.Verb, can.Resource, can.Name)
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "side-by-side-"}}
		for _, spec := range a.taints {
			node.Spec.Taints = append(node.Spec.Taints, startupTaint(spec))
		}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		defer func() { Expect(k8sClient.Delete(ctx, node)).To(Succeed()) }()
		// The API server picks a newly applied policy up within a moment; until then RBAC alone
		// rules, so each attempt is a change of its own.
		attempt := 0
		Eventually(func() error {
			attempt++
			if conditionsOnly[dir] { // it may write only its Node's status
				return writeStatus(ctx, asAgentOn(a, node.Name), node.Name, func(n *corev1.Node) {
					n.Status.Conditions = append(n.Status.Conditions, condition(fmt.Sprintf("example.com/Attempt%d", attempt), corev1.ConditionTrue))
				})
			}
			return patchNode(ctx, asAgentOn(a, node.Name), node.Name, func(n *corev1.Node) {
				n.Labels = map[string]string{"attempt": fmt.Sprint(attempt)}
			})
		}).Should(MatchError(And(ContainSubstring("ValidatingAdmissionPolicy '"+policies[dir]+"'"), ContainSubstring(refusal))),
			"%s: a forbidden change, refused by its own policy", dir)
		check := &controllers.ConfinementCheck{Client: asAgentOn(a, node.Name), NodeName: node.Name,
			Taints: func() []startuptaint.TaintSpec { return a.taints }}
		if conditionsOnly[dir] {
			check.Conditions = []string{a.ownCondition()}
		}
		_, refused, err := check.CheckRemoval(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(refused).NotTo(HaveOccurred(), "%s: its agent's own write, removal or condition", dir)
	}

	It("lets each agent remove its own taint, judged by its own policy, with its own RBAC", func(ctx SpecContext) {
		for _, dir := range sideBySide {
			works(ctx, dir)
		}
	})

	It("leaves the others working when one is uninstalled", func(ctx SpecContext) {
		for i, gone := range sideBySide {
			_, err := kubectl("delete", "--wait=false", "-k", gone)
			Expect(err).NotTo(HaveOccurred())
			for _, dir := range sideBySide[i+1:] {
				works(ctx, dir)
			}
		}
	})
})
