// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// nodeCondition returns the status and reason of the Node's condition of type t ("" when absent).
func nodeCondition(ctx context.Context, node, t string) func(Gomega) [2]string {
	return func(g Gomega) [2]string {
		n := &corev1.Node{}
		g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, n)).To(Succeed())
		for _, c := range n.Status.Conditions {
			if string(c.Type) == t {
				return [2]string{string(c.Status), c.Reason}
			}
		}
		return [2]string{}
	}
}

var _ = Describe("conditions-only mode, as config/samples/node-readiness-controller installs it", Label(testkit.EveryMinor), func() {
	It("publishes the condition as the gates go, never writes a taint, and is refused one", func(ctx SpecContext) {
		in := renderInstall("../../config/samples/node-readiness-controller")
		for _, obj := range in.objs {
			applyObject(ctx, obj)
		}
		daemonSet, env := in.daemonSet, in.env
		Expect(daemonSet.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--conditions-only"))
		taintSpec, err := startuptaint.ParseTaintSpec(env["STARTUP_TAINTS"])
		Expect(err).NotTo(HaveOccurred())
		taint := corev1.Taint{Key: taintSpec.Key, Effect: taintSpec.Effect}
		conditionType := env["CONDITION_TYPE"]
		Expect(taint.Key).To(HavePrefix("readiness.k8s.io/"))
		Expect(conditionType).To(Equal(taint.Key), "the condition and the taint node-readiness-controller removes share a name")

		const node = "e2e-conditions-only"
		driver := setupNode(ctx, node, taint)
		driver.SetReadiness(fakecsi.NotReady)
		agent := in.kubeconfig(node)
		health := freeAddr()
		session := runBinary("--kubeconfig="+agent, "--node-name="+node, "--csi-address="+driver.Path(), "--taint="+env["STARTUP_TAINTS"],
			"--condition-type="+conditionType, "--conditions-only", "--metrics-bind-address=0", "--health-probe-bind-address="+health,
			"--probe-interval=200ms")

		By("the driver not ready: False, and the agent ready, its dry-run condition write admitted")
		Eventually(nodeCondition(ctx, node, conditionType)).Should(Equal([2]string{"False", "CSINotReady"}))
		Eventually(readiness(health)).Should(Equal(http.StatusOK))
		By("the driver ready: True, and the taint stays for node-readiness-controller to remove")
		driver.SetReadiness(fakecsi.Ready)
		Eventually(nodeCondition(ctx, node, conditionType)).Should(Equal([2]string{"True", controllers.ConditionReasonGatesPass}))
		Consistently(hasTaint(ctx, k8sClient, node, taint.Key), "2s").Should(BeTrue())
		By("the driver not ready again: False again")
		driver.SetReadiness(fakecsi.NotReady)
		Eventually(nodeCondition(ctx, node, conditionType)).Should(Equal([2]string{"False", "CSINotReady"}))
		Expect(hasTaint(ctx, k8sClient, node, taint.Key)(Default)).To(BeTrue())
		Expect(session).NotTo(gexec.Exit())

		By("the agent's identity removing the taint: refused by RBAC, and by the policy where another role grants nodes patch")
		asAgent := clientFor(agent)
		remove := func(n *corev1.Node) {
			n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, []startuptaint.TaintSpec{taintSpec})
		}
		err = testkit.PatchNode(ctx, k8sClient, asAgent, node, remove)
		Expect(err).To(MatchError(ContainSubstring("cannot patch resource \"nodes\"")))
		GinkgoWriter.Printf("refused by RBAC: %v\n", err)
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-driver-nodes"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}}}}
		binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-driver-nodes"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: daemonSet.Namespace, Name: daemonSet.Spec.Template.Spec.ServiceAccountName}}}
		for _, o := range []client.Object{role, binding} {
			Expect(k8sClient.Create(ctx, o)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, o)).To(Succeed()) })
		}
		Eventually(func() error { return testkit.PatchNode(ctx, k8sClient, asAgent, node, remove) }).
			Should(MatchError(And(ContainSubstring("["+startuptaint.RefusalConditionsOnly+"]"), ContainSubstring("("+conditionType+")"))))
		GinkgoWriter.Printf("refused by the policy: %v\n", testkit.PatchNode(ctx, k8sClient, asAgent, node, remove))
		Expect(hasTaint(ctx, k8sClient, node, taint.Key)(Default)).To(BeTrue())
	})
})
