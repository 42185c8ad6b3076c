// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

const driverName = "ebs.csi.example.com"

var _ = Describe("the startup-taint-remover binary", func() {
	It("removes the startup taint once the driver is ready and registered, and exits promptly on SIGTERM", func(ctx SpecContext) {
		startup := startupTaint
		other := corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "e2e-node"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{startup, other}}}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })

		driver, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, fakecsi.Ready)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(driver.Stop)

		health := freeAddr()
		session := runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+node.Name, "--csi-address="+driver.Path(),
			"--metrics-bind-address=0", "--health-probe-bind-address="+health, "--probe-interval=200ms")

		Eventually(func(g Gomega) int { status, _ := readyz(g, health); return status }).Should(Equal(http.StatusOK))

		taints := func(g Gomega) []string {
			got := &corev1.Node{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(node), got)).To(Succeed())
			keys := make([]string, 0, len(got.Spec.Taints))
			for _, t := range got.Spec.Taints {
				keys = append(keys, t.Key)
			}
			return keys
		}
		Consistently(taints).Should(ContainElement(startup.Key), "not registered in CSINode yet")

		csiNode := &storagev1.CSINode{
			ObjectMeta: metav1.ObjectMeta{Name: node.Name},
			Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: node.Name}}},
		}
		Expect(k8sClient.Create(ctx, csiNode)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, csiNode))).To(Succeed()) })
		Eventually(taints).ShouldNot(ContainElement(startup.Key))
		Expect(taints(Default)).To(ContainElement(other.Key))
		Eventually(session.Err).Should(gbytes.Say("removed startup taints"))

		start := time.Now()
		session.Signal(syscall.SIGTERM)
		Eventually(session, 5*time.Second).Should(gexec.Exit(0))
		Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))
	})

	It("removes a CNI agent's taint as soon as its configuration file appears, without waiting for a probe", func(ctx SpecContext) {
		cilium := corev1.Taint{Key: "node.cilium.io/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "e2e-cni"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{cilium}}}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
		netd := filepath.Join(GinkgoT().TempDir(), "net.d")
		Expect(os.Mkdir(netd, 0o755)).To(Succeed())
		// An hour between probes: only the watch of the directory can see the file in time.
		session := runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+node.Name, "--taint="+cilium.ToString(),
			"--ready-file="+filepath.Join(netd, "05-cilium.conflist"), "--probe-interval=1h",
			"--metrics-bind-address=0", "--health-probe-bind-address=0")
		Eventually(session.Err).Should(gbytes.Say(`readiness gate does not pass.*"gate":"file"`))
		Consistently(hasTaint(ctx, k8sClient, node.Name, cilium.Key), "1s").Should(BeTrue())

		By("the CNI agent writing its configuration")
		Expect(os.WriteFile(filepath.Join(netd, "05-cilium.conflist"), []byte(`{"cniVersion":"1.0.0","name":"cilium"}`), 0o644)).To(Succeed())
		start := time.Now()
		Eventually(hasTaint(ctx, k8sClient, node.Name, cilium.Key), 10*time.Second, 10*time.Millisecond).Should(BeFalse())
		GinkgoWriter.Printf("the taint went %s after the file was written, with an hour between probes\n", time.Since(start))
	})

	It("removes the taint once another agent publishes the Node condition it requires, and not for its heartbeats", func(ctx SpecContext) {
		network := corev1.Taint{Key: "network.example.com/not-ready", Effect: corev1.TaintEffectNoSchedule}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "e2e-condition"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{network}}}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
		setCondition := func(status corev1.ConditionStatus) {
			GinkgoHelper()
			Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
				n := &corev1.Node{}
				if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(node), n); err != nil {
					return err
				}
				n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeNetworkUnavailable, Status: status,
					Reason: "RouteCreated", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
				return k8sClient.Status().Update(ctx, n)
			})).To(Succeed())
		}
		session := runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+node.Name, "--taint="+network.ToString(),
			"--require-condition=NetworkUnavailable=False", "--metrics-bind-address=0", "--health-probe-bind-address=0")
		Eventually(session.Err).Should(gbytes.Say(`readiness gate does not pass.*"gate":"node-condition"`))

		By("the network agent publishing the condition, first as unavailable")
		setCondition(corev1.ConditionTrue)
		Consistently(hasTaint(ctx, k8sClient, node.Name, network.Key), "1s").Should(BeTrue())
		setCondition(corev1.ConditionFalse)
		start := time.Now()
		Eventually(hasTaint(ctx, k8sClient, node.Name, network.Key), 10*time.Second, 10*time.Millisecond).Should(BeFalse())
		GinkgoWriter.Printf("the taint went %s after NetworkUnavailable turned False\n", time.Since(start))
	})

	It("removes the taint once another DaemonSet's pod on the node is Ready", func(ctx SpecContext) {
		cni := corev1.Taint{Key: "cni.example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "e2e-pod"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{cni}}}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "cni-"}}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		session := runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+node.Name, "--taint="+cni.ToString(),
			"--require-pod="+ns.Name+"/k8s-app=cni-agent", "--metrics-bind-address=0", "--health-probe-bind-address=0")
		Eventually(session.Err).Should(gbytes.Say(`readiness gate does not pass.*"gate":"pod","reason":"no_pod"`))

		By("the CNI agent's pod on this node, not Ready yet")
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "cni-agent", Namespace: ns.Name, Labels: map[string]string{"k8s-app": "cni-agent"}},
			Spec:       corev1.PodSpec{NodeName: node.Name, Containers: []corev1.Container{{Name: "agent", Image: "example.com/cni"}}},
		}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		Eventually(session.Err).Should(gbytes.Say(`readiness gate does not pass.*"gate":"pod","reason":"pod_not_ready"`))
		Consistently(hasTaint(ctx, k8sClient, node.Name, cni.Key), "1s").Should(BeTrue())

		By("the pod turning Ready")
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
		Expect(k8sClient.Status().Update(ctx, pod)).To(Succeed())
		start := time.Now()
		Eventually(hasTaint(ctx, k8sClient, node.Name, cni.Key), 10*time.Second, 10*time.Millisecond).Should(BeFalse())
		GinkgoWriter.Printf("the taint went %s after the pod turned Ready\n", time.Since(start))
	})

	It("exits with status 2 and one line naming the flag, without contacting the API server", func() {
		var requests atomic.Int64
		apiserver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			requests.Add(1)
			http.Error(w, "no", http.StatusForbidden)
		}))
		DeferCleanup(apiserver.Close)
		countingKubeconfig := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
		Expect(os.WriteFile(countingKubeconfig, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, apiserver.URL)), 0o600)).To(Succeed())

		garbage := filepath.Join(GinkgoT().TempDir(), "garbage")
		Expect(os.WriteFile(garbage, []byte("{ this is not a kubeconfig"), 0o600)).To(Succeed())
		base := []string{"--kubeconfig=" + countingKubeconfig, "--node-name=n1", "--csi-address=/csi.sock",
			"--metrics-bind-address=0", "--health-probe-bind-address=0"}
		// Every flag with each class of bad value that applies to it: empty, malformed, out of
		// range, wrong type; then an unknown flag and a positional argument. Later flags win.
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--node-name="}, "--node-name"},
			{[]string{"--node-name=Not_A_Node"}, "--node-name"},
			{[]string{"--taint="}, "-taint"},
			{[]string{"--taint=not a key"}, "-taint"},
			{[]string{"--taint=a.example.com/x:Sometimes"}, "-taint"},
			{[]string{"--taint=a.example.com/x=v"}, "-taint"},
			{[]string{"--csi-address=", "--taint=a/b"}, "no readiness gate"},
			{[]string{"--csi-address=relative.sock"}, "--csi-address"},
			{[]string{"--require-csinode=perhaps"}, "-require-csinode"},
			{[]string{"--require-allocatable=1x"}, "-require-allocatable"},
			{[]string{"--require-csinode=false", "--require-allocatable"}, "--require-allocatable"},
			{[]string{"--csi-address=", "--taint=a/b", "--ready-url="}, "no readiness gate"},
			{[]string{"--ready-url=file:///etc/passwd"}, "--ready-url"},
			{[]string{"--ready-url=http://[::1"}, "--ready-url"},
			{[]string{"--probe-interval="}, "-probe-interval"},
			{[]string{"--probe-interval=fast"}, "-probe-interval"},
			{[]string{"--probe-interval=0s"}, "--probe-interval"},
			{[]string{"--probe-interval=-1s"}, "--probe-interval"},
			{[]string{"--probe-timeout=0"}, "--probe-timeout"},
			{[]string{"--probe-timeout=soon"}, "-probe-timeout"},
			{[]string{"--max-wait=-5m"}, "--max-wait"},
			{[]string{"--ready-container=driver"}, "--ready-container"},
			{[]string{"--ready-container=Not_A_Name"}, "--ready-container"},
			{[]string{"--taint=a/b", "--require-condition=NetworkUnavailable=no"}, "-require-condition"},
			{[]string{"--taint=a/b", "--require-pod=k8s-app=cni-agent"}, "-require-pod"},
			{[]string{"--taint=a/b", "--require-condition=example.com/Ready", "--condition-type=example.com/Ready"}, "--require-condition"},
			{[]string{"--dry-run", "--require-confinement"}, "--require-confinement"},
			{[]string{"--max-wait=later"}, "-max-wait"},
			{[]string{"--metrics-bind-address="}, "--metrics-bind-address"},
			{[]string{"--metrics-bind-address=8443"}, "--metrics-bind-address"},
			{[]string{"--metrics-bind-address=:99999"}, "--metrics-bind-address"},
			{[]string{"--metrics-secure=maybe"}, "-metrics-secure"},
			{[]string{"--enable-http2=2"}, "-enable-http2"},
			{[]string{"--metrics-cert-path=/does/not/exist"}, "--metrics-cert-path"},
			{[]string{"--metrics-cert-path=/", "--metrics-cert-key="}, "--metrics-cert-key"},
			{[]string{"--health-probe-bind-address=localhost"}, "--health-probe-bind-address"},
			{[]string{"--health-probe-bind-address=:-1"}, "--health-probe-bind-address"},
			{[]string{"--kubeconfig=/does/not/exist"}, "--kubeconfig"},
			{[]string{"--kubeconfig=" + garbage}, "--kubeconfig"},
			{[]string{"--zap-log-level=loud"}, "-zap-log-level"},
			{[]string{"--zap-encoder=xml"}, "-zap-encoder"},
			// A renderer that left the manifests' placeholders in the DaemonSet.
			{[]string{`--taint=\TAINTS`}, "placeholder"},
			{[]string{`--retaint-after=\RETAINTAFTER`}, "placeholder"},
			{[]string{`--condition-type=\CONDITIONTYPE`}, "placeholder"},
			{[]string{"--bogus"}, "-bogus"},
			{[]string{"extra-argument"}, "unexpected argument"},
		} {
			code, stderr := runToExit(append(append([]string{}, base...), tc.args...)...)
			Expect(code).To(Equal(2), "args %v: stderr %q", tc.args, stderr)
			Expect(strings.Split(strings.TrimSpace(stderr), "\n")).To(HaveLen(1), "args %v", tc.args)
			Expect(stderr).To(ContainSubstring(tc.want), "args %v", tc.args)
		}
		// A bad groups file, without a group flag beside it (that is refused too).
		dir := GinkgoT().TempDir()
		group := "- name: a\n  taint: a.example.com/x\n  ready-url: http://127.0.0.1/\n"
		for i, tc := range []struct{ content, want string }{
			{"groups: [", "--config"},
			{"groups: []", "groups: empty"},
			{"groups:\n- name: a\n  csi-address: csi.sock\n", `groups[0].csi-address: "csi.sock" is not an absolute path`},
			{"groups:\n" + group + group, `groups[1].name: "a" is another group's`},
			{"groups:\n" + group + "  max-wait: 1m\n", "groups[0].max-wait: not a setting of a group"},
			{"groups:\n" + group + "  taint: [a.example.com/y]\n", `key "taint" already set`},
			{"groups:\n- name: a\n  taint: [a.example.com/x:Sometimes]\n  ready-url: http://127.0.0.1/\n", "groups[0].taint"},
		} {
			path := filepath.Join(dir, fmt.Sprintf("groups-%d.yaml", i))
			Expect(os.WriteFile(path, []byte(tc.content), 0o600)).To(Succeed())
			code, stderr := runToExit("--kubeconfig="+countingKubeconfig, "--node-name=n1", "--config="+path,
				"--metrics-bind-address=0", "--health-probe-bind-address=0")
			Expect(code).To(Equal(2), "%q: stderr %q", tc.content, stderr)
			Expect(strings.Split(strings.TrimSpace(stderr), "\n")).To(HaveLen(1), "%q", tc.content)
			Expect(stderr).To(ContainSubstring(tc.want), "%q", tc.content)
		}
		code, stderr := runToExit(append(append([]string{}, base...), "--config=/does/not/exist")...)
		Expect(code).To(Equal(2))
		Expect(stderr).To(ContainSubstring("--csi-address: set it in the groups of --config"))
		Expect(requests.Load()).To(BeZero())
	})

	It("says how to point it at a cluster when there is none", func() {
		code, stderr := runToExit("--node-name=n1", "--csi-address=/csi.sock")
		Expect(code).To(Equal(2))
		Expect(stderr).To(ContainSubstring("set --kubeconfig or KUBECONFIG"))

		code, stderr = runToExit("--node-name=n1", "--csi-address=/csi.sock", "--kubeconfig=/does/not/exist")
		Expect(code).To(Equal(2))
		Expect(stderr).To(ContainSubstring("--kubeconfig /does/not/exist"))
	})
})
