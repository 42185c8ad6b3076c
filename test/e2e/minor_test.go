// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// runDefault starts the binary as config/default's agent on node, with its defaults (confinement
// required).
func runDefault(in renderedInstall, node, csi, health string) *gexec.Session {
	GinkgoHelper()
	return runBinary("--kubeconfig="+in.kubeconfig(node), "--node-name="+node, "--csi-address="+csi,
		"--taint="+in.env["STARTUP_TAINTS"], "--metrics-bind-address=0", "--health-probe-bind-address="+health, "--probe-interval=200ms")
}

var _ = Describe("config/default on this minor of Kubernetes", func() {
	if !testkit.ServesMinor(startuptaint.MinKubernetesMinor) {
		return
	}
	It("applies, and its agent removes its own taint, confined", Label(testkit.EveryMinor), func(ctx SpecContext) {
		in := renderInstall("../../config/default")
		for _, obj := range in.objs {
			applyObject(ctx, obj)
		}
		const node = "e2e-minor-default"
		taint := corev1.Taint{Key: in.env["STARTUP_TAINTS"], Effect: corev1.TaintEffectNoExecute}
		driver := setupNode(ctx, node, taint)
		health := freeAddr()
		session := runDefault(in, node, driver.Path(), health)
		Eventually(hasTaint(ctx, k8sClient, node, taint.Key)).Should(BeFalse())
		Eventually(readiness(health)).Should(Equal(http.StatusOK))
		Eventually(session.Err).Should(gbytes.Say("the admission policy confines this agent"))
	})
})

// Below the oldest supported minor the policy compiles too (it uses no CEL newer than 1.31's), so
// no install leaves the agent's token unjudged there; the agent itself counts on no confinement
// and writes nothing.
var _ = Describe("config/default below the oldest supported minor", func() {
	if testkit.ServesMinor(startuptaint.MinKubernetesMinor) {
		return
	}
	It("applies whole, judges the agent's token as on every minor, and leaves an agent that removes nothing and says why", Label(testkit.BelowMinimum), func(ctx SpecContext) {
		in := renderInstall("../../config/default")
		By("kubectl apply -k: every object applies, the admission policies included")
		for _, obj := range in.objs {
			applyObject(ctx, obj)
		}

		const node = "e2e-below-minimum"
		taint := corev1.Taint{Key: in.env["STARTUP_TAINTS"], Effect: corev1.TaintEffectNoExecute}
		driver := setupNode(ctx, node, taint)
		other := "e2e-below-minimum-other"
		Expect(k8sClient.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}}))).To(Succeed())
		})

		By("the agent's token: refused by the policy's own rules (test/manifests runs the whole attack table here)")
		token := clientFor(in.kubeconfig(node))
		Eventually(func(g Gomega) {
			err := token.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: other}},
				client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`)))
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
			g.Expect(err.Error()).To(ContainSubstring("[" + startuptaint.RefusalOwnNode + "]"))
		}).Should(Succeed())
		err := token.Patch(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}},
			client.RawPatch(types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
		Expect(err.Error()).To(ContainSubstring("[" + startuptaint.RefusalSpec + "]"))

		health := freeAddr()
		session := runDefault(in, node, driver.Path(), health)

		By("one Error log line, a Warning event on its Node, /readyz failing, and the taint held")
		Eventually(session.Err).Should(gbytes.Say(`"level":"error".*the API server runs v1\.32\.\d+, older than Kubernetes 1\.33, ` +
			`the oldest minor this release supports, and confinement is required`))
		var note string
		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
			for _, e := range list.Items {
				if e.Reason == startuptaint.EventReasonNotConfined && e.Regarding.Name == node && e.Type == corev1.EventTypeWarning {
					note = e.Note
				}
			}
			g.Expect(note).To(ContainSubstring("writes nothing until the control plane runs Kubernetes 1.33 or later"))
		}).Should(Succeed())
		GinkgoWriter.Printf("the NotConfined event: %s\n", note)
		Eventually(func(g Gomega) string { _, body := readyz(g, health); return body }).
			Should(ContainSubstring("[-]startup-taint-removal failed"))
		Consistently(hasTaint(ctx, k8sClient, node, taint.Key), "3s").Should(BeTrue())
		Expect(strings.Count(string(session.Err.Contents()), `"level":"error"`)).To(Equal(1), "one Error line")
		Expect(session).NotTo(gexec.Exit(), "it keeps running, and checking")
	})
})

var _ = Describe("a setting this minor of Kubernetes cannot serve", func() {
	if testkit.ServesMinor(startuptaint.ResourceSliceMinor) || !testkit.ServesMinor(startuptaint.MinKubernetesMinor) {
		return
	}
	It("ends the binary with status 2 and one line naming the setting and the minor it needs", Label(testkit.EveryMinor), func() {
		code, stderr := runToExit("--kubeconfig="+kubeconfig, "--node-name=n1", "--taint=gpu.example.com/agent-not-ready",
			"--require-resourceslice=gpu.example.com", "--metrics-bind-address=0", "--health-probe-bind-address=0")
		Expect(code).To(Equal(2))
		Expect(strings.Count(stderr, "\n")).To(Equal(1), "one line: %s", stderr)
		Expect(stderr).To(MatchRegexp(`^startup-taint-remover: .*--require-resourceslice: needs ResourceSlices of resource\.k8s\.io/v1, ` +
			`which Kubernetes serves from 1\.34; the API server runs v1\.33`))
	})
})
