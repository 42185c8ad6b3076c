// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"io"
	"net/http"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// The helpers the suite's files share.

// readyz returns the status and body of the binary's verbose readiness endpoint at addr.
func readyz(g Gomega, addr string) (int, string) {
	resp, err := http.Get("http://" + addr + "/readyz?verbose")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	return resp.StatusCode, string(body)
}

// setupNode creates Node name with taints, its CSINode listing the driver, and a driver that
// answers Ready on a socket of its own.
func setupNode(ctx context.Context, name string, taints ...corev1.Taint) *fakecsi.Driver {
	GinkgoHelper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.NodeSpec{Taints: taints}}
	Expect(k8sClient.Create(ctx, node)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
	csiNode := &storagev1.CSINode{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: name}}},
	}
	Expect(k8sClient.Create(ctx, csiNode)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, csiNode))).To(Succeed()) })
	driver, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, fakecsi.Ready)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(driver.Stop)
	return driver
}

// hasTaint reports, polled, whether Node name carries a taint of key.
func hasTaint(ctx context.Context, c client.Client, name, key string) func(Gomega) bool {
	return func(g Gomega) bool {
		node := &corev1.Node{}
		g.Expect(c.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
		for _, t := range node.Spec.Taints {
			if t.Key == key {
				return true
			}
		}
		return false
	}
}

// eventCount counts the events with reason on the node.
func eventCount(g Gomega, ctx context.Context, node, reason string) int {
	n, err := testkit.EventCount(ctx, k8sClient, node, reason)
	g.Expect(err).NotTo(HaveOccurred())
	return n
}
