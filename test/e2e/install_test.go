// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// kubeconfigAs writes a kubeconfig that acts, through the admin's, as the pod of namespace/account
// on node: the identity and claims a pod-bound service-account token carries.
func kubeconfigAs(namespace, account, node string) string {
	GinkgoHelper()
	config, err := clientcmd.LoadFromFile(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	for _, auth := range config.AuthInfos {
		auth.Impersonate = "system:serviceaccount:" + namespace + ":" + account
		auth.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
		auth.ImpersonateUserExtra = testkit.PodTokenExtra(context.Background(), k8sClient, node)
	}
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig-"+account)
	Expect(clientcmd.WriteToFile(*config, path)).To(Succeed())
	return path
}

// renderedInstall is a kustomization as the pinned kustomize renders it: its objects, its agent's
// DaemonSet, and the environment of the agent's container.
type renderedInstall struct {
	objs      []*unstructured.Unstructured
	daemonSet appsv1.DaemonSet
	env       map[string]string
}

// renderInstall renders the kustomization in dir.
func renderInstall(dir string) renderedInstall {
	GinkgoHelper()
	objs, err := objects.FromKustomization(dir)
	Expect(err).NotTo(HaveOccurred())
	in := renderedInstall{objs: objs, env: map[string]string{}}
	for _, obj := range objs {
		if obj.GetKind() == "DaemonSet" {
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &in.daemonSet)).To(Succeed())
		}
	}
	Expect(in.daemonSet.Spec.Template.Spec.Containers).NotTo(BeEmpty(), "%s renders the agent's DaemonSet", dir)
	for _, e := range in.daemonSet.Spec.Template.Spec.Containers[0].Env {
		in.env[e.Name] = e.Value
	}
	return in
}

// kubeconfig is a kubeconfig that acts as the install's agent on node.
func (in renderedInstall) kubeconfig(node string) string {
	GinkgoHelper()
	return kubeconfigAs(in.daemonSet.Namespace, in.daemonSet.Spec.Template.Spec.ServiceAccountName, node)
}

// clientFor is a client that acts as kubeconfig's user.
func clientFor(kubeconfig string) client.Client {
	GinkgoHelper()
	restAs, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	c, err := client.New(restAs, client.Options{Scheme: k8sClient.Scheme()})
	Expect(err).NotTo(HaveOccurred())
	return c
}

// brokenInstall is config/default applied with its policies broken as objects.AsOldRenders breaks
// them: the install, its taint, and the policies as they should have been.
type brokenInstall struct {
	renderedInstall
	startup  corev1.Taint
	policies []*admissionv1.ValidatingAdmissionPolicy
}

// applyObject creates a rendered object; a cluster-scoped one, and a DaemonSet, is deleted when the
// spec ends. The namespace and the rest of what is in it stay for the next spec: envtest runs no
// namespace controller to finish deleting them, and they judge no one; a DaemonSet would be run
// by the next spec's DaemonSet controller, on its nodes.
func applyObject(ctx SpecContext, obj *unstructured.Unstructured) {
	GinkgoHelper()
	Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, obj.DeepCopy()))).To(Succeed(), "create %s %s", obj.GetKind(), obj.GetName())
	// kustomize writes its namespace into cluster-scoped kinds it does not know, such as the
	// policies, so ask the API server's mapping instead.
	namespaced, err := k8sClient.IsObjectNamespaced(obj)
	Expect(err).NotTo(HaveOccurred())
	if (!namespaced && obj.GetKind() != "Namespace") || obj.GetKind() == "DaemonSet" {
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, obj.DeepCopy()))).To(Succeed())
		})
	}
}

// installBroken applies config/default with broken policies, until the spec ends.
func installBroken(ctx SpecContext) brokenInstall {
	GinkgoHelper()
	in := brokenInstall{renderedInstall: renderInstall("../../config/default")}
	for _, obj := range in.objs {
		if obj.GetKind() == "ValidatingAdmissionPolicy" {
			policy := &admissionv1.ValidatingAdmissionPolicy{}
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, policy)).To(Succeed())
			in.policies = append(in.policies, policy)
			obj = &unstructured.Unstructured{}
			broken, err := runtime.DefaultUnstructuredConverter.ToUnstructured(objects.AsOldRenders(policy))
			Expect(err).NotTo(HaveOccurred())
			obj.Object = broken
		}
		applyObject(ctx, obj)
	}
	Expect(in.policies).NotTo(BeEmpty())
	in.startup = corev1.Taint{Key: in.env["STARTUP_TAINTS"], Effect: corev1.TaintEffectNoExecute}
	Expect(in.startup.Key).NotTo(BeEmpty())
	return in
}

// startAgent runs the binary as the install's agent on node, once the API server judges it by the
// broken policies (it compiles a new policy a moment after it is created), so the agent's first
// answer is the broken install's; it returns the process and its health address.
func (in brokenInstall) startAgent(ctx SpecContext, node string, driver *fakecsi.Driver) (*gexec.Session, string) {
	GinkgoHelper()
	agent := in.kubeconfig(node)
	asAgent := clientFor(agent)
	// Until the API server has picked the broken policy up, a changeless write is admitted.
	Eventually(func() error {
		return asAgent.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			client.RawPatch(types.MergePatchType, []byte(`{}`)), client.DryRunAll)
	}).Should(MatchError(ContainSubstring("cannot work with the settings")))
	health := freeAddr()
	return runBinary("--kubeconfig="+agent, "--node-name="+node, "--csi-address="+driver.Path(), "--taint="+in.startup.Key,
		"--metrics-bind-address=0", "--health-probe-bind-address="+health, "--probe-interval=200ms"), health
}

// fix updates the policies to what the pinned kustomize renders.
func (in brokenInstall) fix(ctx SpecContext) {
	GinkgoHelper()
	for _, policy := range in.policies {
		live := &admissionv1.ValidatingAdmissionPolicy{}
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(policy), live)).To(Succeed())
		live.Spec = policy.Spec
		Expect(k8sClient.Update(ctx, live)).To(Succeed())
	}
}

// readiness is the status of the binary's readiness endpoint at addr.
func readiness(addr string) func(Gomega) int {
	return func(g Gomega) int { s, _ := readyz(g, addr); return s }
}

var _ = Describe("an install whose admission policy refuses the agent's removal", Serial, Label(testkit.EveryMinor), func() {
	It("keeps the agent not ready, says why once, and recovers without a restart when the policy is fixed", func(ctx SpecContext) {
		By("installing the policies as kustomize v5.5.0 (kubectl 1.32) rendered them")
		in := installBroken(ctx)
		startup := in.startup
		const node = "e2e-refused"
		driver := setupNode(ctx, node, startup)
		session, health := in.startAgent(ctx, node, driver)

		var note string
		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
			i := slices.IndexFunc(list.Items, func(e eventsv1.Event) bool {
				return e.Regarding.Name == node && e.Reason == startuptaint.EventReasonRemovalRefused
			})
			g.Expect(i).NotTo(Equal(-1), "no %s event yet", startuptaint.EventReasonRemovalRefused)
			g.Expect(list.Items[i].Type).To(Equal(corev1.EventTypeWarning))
			note = list.Items[i].Note
		}).Should(Succeed())
		Expect(note).To(And(ContainSubstring("cannot work with the settings this policy was rendered with"),
			ContainSubstring("retaint-after 'RETAINTAFTER'"), ContainSubstring("admission policy startup-taint-remover-own-node-only"),
			ContainSubstring("--retaint-after")))
		status, body := readyz(Default, health)
		Expect(status).To(Equal(http.StatusInternalServerError))
		Expect(body).To(ContainSubstring("[-]startup-taint-removal failed"))
		Consistently(readiness(health), "3s").Should(Equal(http.StatusInternalServerError))
		Expect(hasTaint(ctx, k8sClient, node, startup.Key)(Default)).To(BeTrue())
		logged := strings.Count(string(session.Err.Contents()), "the API server refuses this agent's removal of its startup taints")
		Expect(logged).To(Equal(1), "one log line, not one per retry")
		GinkgoWriter.Printf("refused: /readyz %d\n%s\nevent %s %s: %s\n", status, body, corev1.EventTypeWarning, startuptaint.EventReasonRemovalRefused, note)

		By("fixing the policies, as rendering with kustomize v5.4.2 or later does")
		fixed := time.Now()
		in.fix(ctx)
		Eventually(readiness(health), time.Minute).Should(Equal(http.StatusOK))
		ready := time.Since(fixed)
		Eventually(hasTaint(ctx, k8sClient, node, startup.Key), time.Minute).Should(BeFalse())
		removed := time.Since(fixed)
		Expect(session).NotTo(gexec.Exit(), "recovered without a restart")
		Eventually(func(g Gomega) int { return eventCount(g, ctx, node, startuptaint.EventReasonRemovalAdmitted) }).Should(Equal(1))
		recovery := fmt.Sprintf("after the policy was fixed: ready in %s, taint removed in %s", ready.Round(time.Millisecond), removed.Round(time.Millisecond))
		GinkgoWriter.Println(recovery)
		AddReportEntry("recovery", recovery)
	})

	It("is not ready either on a Node whose taint is gone, so a rollout over a running fleet stops too", func(ctx SpecContext) {
		in := installBroken(ctx)
		const node = "e2e-refused-untainted"
		driver := setupNode(ctx, node)
		_, health := in.startAgent(ctx, node, driver)
		Eventually(func(g Gomega) int { return eventCount(g, ctx, node, startuptaint.EventReasonRemovalRefused) }).Should(Equal(1))
		Consistently(readiness(health), "2s").Should(Equal(http.StatusInternalServerError))
		in.fix(ctx)
		Eventually(readiness(health), time.Minute).Should(Equal(http.StatusOK))
	})
})
