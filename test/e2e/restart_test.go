// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// scrape reads the plain-HTTP metrics endpoint at addr.
func scrape(g Gomega, addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return string(body)
}

// metricSum sums every series of the metric name at addr whose labels contain labels (for
// example `controller="startup-taint"`); a metric with no such series sums to 0.
func metricSum(g Gomega, addr, name, labels string) float64 {
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`(\{[^}]*\})? (\S+)$`).FindAllStringSubmatch(scrape(g, addr), -1) {
		if !strings.Contains(m[1], labels) {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		g.Expect(err).NotTo(HaveOccurred())
		sum += v
	}
	return sum
}

var _ = Describe("the binary's memory of its Node", func() {
	startAgent := func(node, socket, metrics string) *gexec.Session {
		return runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+node, "--csi-address="+socket,
			"--metrics-secure=false", "--metrics-bind-address="+metrics, "--health-probe-bind-address=0", "--probe-interval=200ms")
	}
	stop := func(s *gexec.Session) {
		s.Signal(syscall.SIGTERM)
		Eventually(s, 5*time.Second).Should(gexec.Exit(0))
	}

	It("counts a taint re-added after a restart as re-added, not as the node's first removal", func(ctx SpecContext) {
		const name = "e2e-restart"
		driver := setupNode(ctx, name, startupTaint)
		first := startAgent(name, driver.Path(), freeAddr())
		Eventually(hasTaint(ctx, k8sClient, name, startupTaint.Key)).Should(BeFalse())
		Eventually(func(g Gomega) int { return eventCount(g, ctx, name, startuptaint.EventReasonTaintRemoved) }).Should(Equal(1))
		stop(first)

		By("re-adding the taint while no agent runs, as a node group re-sync does after a rollout")
		Expect(testkit.UpdateNode(ctx, k8sClient, name, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, startupTaint)
		})).To(Succeed())
		metrics := freeAddr()
		startAgent(name, driver.Path(), metrics)
		Eventually(hasTaint(ctx, k8sClient, name, startupTaint.Key)).Should(BeFalse())
		Eventually(func(g Gomega) int { return eventCount(g, ctx, name, startuptaint.EventReasonTaintRemovedAgain) }).Should(Equal(1))
		Expect(eventCount(Default, ctx, name, startuptaint.EventReasonTaintRemoved)).To(Equal(1), "no second first removal")
		Eventually(func(g Gomega) float64 {
			return metricSum(g, metrics, "startup_taint_readded_total", `taint="`+startupTaint.Key+`"`)
		}).Should(Equal(1.0))
		Expect(scrape(Default, metrics)).To(ContainSubstring("\nstartup_taint_removal_seconds_count 0\n"),
			"the node's age is no sample of the fleet's time to first removal")
	})

	It("reports a driver that answers but is not ready, with the taint named after it", func(ctx SpecContext) {
		const name = "e2e-not-ready"
		driver := setupNode(ctx, name, startupTaint)
		driver.SetReadiness(fakecsi.NotReady)
		metrics := freeAddr()
		startAgent(name, driver.Path(), metrics)
		Eventually(func(g Gomega) int { return eventCount(g, ctx, name, startuptaint.EventReasonWaitingForDriver) }).Should(Equal(1))
		Eventually(func(g Gomega) float64 {
			return metricSum(g, metrics, "startup_taint_present", `taint="`+startupTaint.Key+`"`)
		}).Should(Equal(1.0))
		Consistently(hasTaint(ctx, k8sClient, name, startupTaint.Key), "1s").Should(BeTrue())
	})

	It("with --dry-run, reports the removal it would make and sends no patch", func(ctx SpecContext) {
		const name = "e2e-dry-run"
		driver := setupNode(ctx, name, startupTaint)
		before := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, before)).To(Succeed())
		metrics := freeAddr()
		runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+name, "--csi-address="+driver.Path(), "--dry-run",
			"--metrics-secure=false", "--metrics-bind-address="+metrics, "--health-probe-bind-address=0", "--probe-interval=200ms")
		Eventually(func(g Gomega) int { return eventCount(g, ctx, name, startuptaint.EventReasonWouldRemoveTaint) }).Should(Equal(1))
		Eventually(func(g Gomega) float64 {
			return metricSum(g, metrics, "startup_taint_removals_total", `result="dry_run",taint="`+startupTaint.Key+`"`)
		}).Should(Equal(1.0))
		Consistently(hasTaint(ctx, k8sClient, name, startupTaint.Key), "1s").Should(BeTrue())
		after := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, after)).To(Succeed())
		Expect(after.ResourceVersion).To(Equal(before.ResourceVersion), "the Node was not written")
		Expect(metricSum(Default, metrics, "rest_client_requests_total", `method="PATCH"`)).To(BeZero(), "no patch was sent")
		Expect(metricSum(Default, metrics, "rest_client_requests_total", `method="PUT"`)).To(BeZero())
	})
})
