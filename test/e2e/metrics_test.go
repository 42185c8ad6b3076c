// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"crypto/tls"
	"io"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

var _ = Describe("the secure metrics endpoint", func() {
	It("answers 401 without a token, 403 without the /metrics permission and 200 with it", func(ctx SpecContext) {
		nodeName := "metrics-node"
		startup := startupTaint
		driver := setupNode(ctx, nodeName, startup)

		addr := freeAddr()
		runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+nodeName, "--csi-address="+driver.Path(),
			"--metrics-bind-address="+addr, "--health-probe-bind-address=0")

		By("creating a service account allowed to read /metrics and one that is not")
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metrics-test"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		for _, name := range []string{"scraper", "stranger"} {
			Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns.Name}})).To(Succeed())
		}
		role := &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		}
		Expect(k8sClient.Create(ctx, role)).To(Succeed())
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "e2e-metrics-reader"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "scraper", Namespace: ns.Name}},
		}
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			for _, o := range []client.Object{binding, role, ns} {
				Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, o))).To(Succeed())
			}
		})
		clientset, err := kubernetes.NewForConfig(restConfig)
		Expect(err).NotTo(HaveOccurred())
		token := func(sa string) string {
			tr, err := clientset.CoreV1().ServiceAccounts(ns.Name).CreateToken(ctx, sa,
				&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)}},
				metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			return tr.Status.Token
		}

		// The endpoint's certificate is self-signed: this test checks authentication and
		// authorization, not the certificate chain.
		httpClient := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // self-signed test certificate
		}}
		get := func(bearer string) (int, string) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/metrics", nil)
			Expect(err).NotTo(HaveOccurred())
			if bearer != "" {
				req.Header.Set("Authorization", "Bearer "+bearer)
			}
			resp, err := httpClient.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer func() { _ = resp.Body.Close() }()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}

		Eventually(func() int { code, _ := get(""); return code }).Should(Equal(http.StatusUnauthorized))
		code, body := get(token("stranger"))
		Expect(code).To(Equal(http.StatusForbidden), body)
		scraper := token("scraper")
		Eventually(func(g Gomega) {
			code, body := get(scraper)
			g.Expect(code).To(Equal(http.StatusOK))
			for _, name := range []string{
				`startup_taint_present{taint="` + startup.Key + `"} 0`,
				`startup_taint_removals_total{result="removed",taint="` + startup.Key + `"} 1`,
				"startup_taint_removal_seconds_bucket", "startup_taint_ready_to_removed_seconds_bucket",
				`startup_taint_gate_ready{gate="csi"} 1`, `startup_taint_gate_ready{gate="csinode"} 1`,
				"startup_taint_probe_duration_seconds_bucket", "startup_taint_build_info{",
				"controller_runtime_reconcile_total", "process_resident_memory_bytes",
			} {
				g.Expect(body).To(ContainSubstring(name))
			}
		}).Should(Succeed())
	})
})
