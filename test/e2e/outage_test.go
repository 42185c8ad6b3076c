// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// tcpProxy forwards a loopback port to the API server while it is up, and refuses connections
// (and cuts the open ones) while it is down: to the agent, an unreachable API server.
type tcpProxy struct {
	addr, target string
	mu           sync.Mutex
	lis          net.Listener
	conns        []net.Conn
}

func (p *tcpProxy) up() {
	GinkgoHelper()
	lis, err := net.Listen("tcp", p.addr)
	Expect(err).NotTo(HaveOccurred())
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
}

func (p *tcpProxy) forward(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, s)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	_, _ = io.Copy(c, s)
	_ = c.Close()
}

func (p *tcpProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		_ = p.lis.Close()
		p.lis = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// kubeconfigVia writes the admin kubeconfig with its server replaced by host:port.
func kubeconfigVia(hostPort string) string {
	GinkgoHelper()
	data, err := os.ReadFile(kubeconfig)
	Expect(err).NotTo(HaveOccurred())
	real := strings.TrimPrefix(restConfig.Host, "https://")
	real = strings.TrimSuffix(strings.TrimPrefix(real, "http://"), "/")
	path := filepath.Join(GinkgoT().TempDir(), "kubeconfig-via")
	Expect(os.WriteFile(path, []byte(strings.ReplaceAll(string(data), real, hostPort)), 0o600)).To(Succeed())
	return path
}

var startupTaint = corev1.Taint{Key: driverName + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute}

var _ = Describe("API server outages", Serial, func() {
	It("waits out an API server that is unreachable at start, without exiting", func(ctx SpecContext) {
		name := "outage-at-start"
		driver := setupNode(ctx, name, startupTaint)
		proxy := &tcpProxy{addr: freeAddr(), target: strings.TrimSuffix(strings.TrimPrefix(restConfig.Host, "https://"), "/")}
		DeferCleanup(proxy.down)
		health := freeAddr()
		session := runBinary("--kubeconfig="+kubeconfigVia(proxy.addr), testkit.Unconfined, "--node-name="+name, "--csi-address="+driver.Path(),
			"--metrics-bind-address=0", "--health-probe-bind-address="+health)

		status := func(g Gomega) int { s, _ := readyz(g, health); return s }
		Eventually(session.Err).Should(gbytes.Say("cannot list or watch through the API server"))
		Consistently(status, 5*time.Second).Should(Equal(http.StatusInternalServerError))
		Expect(session).NotTo(gexec.Exit(), "the process keeps running through the outage")
		Expect(strings.Count(string(session.Err.Contents()), "cannot list or watch")).To(Equal(1),
			"one line for the outage, not one per retry")

		proxy.up()
		back := time.Now()
		Eventually(hasTaint(ctx, k8sClient, name, startupTaint.Key), time.Minute).Should(BeFalse())
		GinkgoWriter.Printf("taint removed %s after the API server became reachable\n", time.Since(back).Round(time.Millisecond))
		Expect(status(Default)).To(Equal(http.StatusOK))
		Eventually(session.Err).Should(gbytes.Say("the API server answers again"))
	})

	It("re-establishes its watch after the API server restarts and removes a taint added meanwhile", func(ctx SpecContext) {
		name := "outage-restart"
		driver := setupNode(ctx, name, startupTaint)
		runBinary("--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+name, "--csi-address="+driver.Path(),
			"--metrics-bind-address=0", "--health-probe-bind-address=0")
		Eventually(hasTaint(ctx, k8sClient, name, startupTaint.Key)).Should(BeFalse())

		By("starting a second API server on the same etcd, to write while the first is away")
		primary := testEnv.ControlPlane.APIServer
		second := &envtest.ControlPlane{APIServer: &envtest.APIServer{EtcdURL: primary.EtcdURL}}
		second.APIServer.Configure().Set("shutdown-watch-termination-grace-period", "1s")
		Expect(second.APIServer.Start()).To(Succeed())
		DeferCleanup(second.APIServer.Stop)
		user, err := second.AddUser(envtest.User{Name: "second-admin", Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		secondClient, err := client.New(user.Config(), client.Options{Scheme: scheme.Scheme})
		Expect(err).NotTo(HaveOccurred())

		By("stopping the API server the agent talks to, and re-adding the taint through the other")
		Expect(primary.Stop()).To(Succeed())
		stopped := true
		DeferCleanup(func() {
			if stopped {
				Expect(primary.Start()).To(Succeed())
			}
		})
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			node := &corev1.Node{}
			if err := secondClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
				return err
			}
			node.Spec.Taints = append(node.Spec.Taints, startupTaint)
			return secondClient.Update(ctx, node)
		})).To(Succeed())
		time.Sleep(2 * time.Second)
		Expect(hasTaint(ctx, secondClient, name, startupTaint.Key)(Default)).To(BeTrue())

		By("starting it again")
		Expect(primary.Start()).To(Succeed())
		stopped = false
		back := time.Now()
		Eventually(hasTaint(ctx, secondClient, name, startupTaint.Key), time.Minute).Should(BeFalse())
		GinkgoWriter.Printf("after the API server restart, the taint added meanwhile was removed in %s\n",
			time.Since(back).Round(time.Millisecond))
		AddReportEntry("removal after API server restart", time.Since(back).Round(time.Millisecond).String())
	})
})
