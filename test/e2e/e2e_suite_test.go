// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package e2e runs the real startup-taint-remover binary as a process against an envtest API
// server, through a kubeconfig, the way a DaemonSet pod runs it.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

var (
	testEnv    *envtest.Environment
	k8sClient  client.Client
	binary     string
	kubeconfig string
	restConfig *rest.Config
)

var _ = ReportAfterSuite("timings", testkit.ReportTimings)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "End-to-end Suite")
}

var _ = BeforeSuite(func() {
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	SetDefaultConsistentlyDuration(2 * time.Second)

	var err error
	binary, err = gexec.Build("github.com/startup-taint-remover/startup-taint-remover/cmd")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(gexec.CleanupBuildArtifacts)

	// A fixed certificate directory lets a spec restart the API server with the same serving
	// certificate and port, as a real restart keeps them.
	testEnv = &envtest.Environment{ControlPlane: envtest.ControlPlane{APIServer: &envtest.APIServer{CertDir: GinkgoT().TempDir()}}}
	// Without a bound, the API server waits for open watches before it stops, longer than
	// envtest waits for it.
	testEnv.ControlPlane.APIServer.Configure().Set("shutdown-watch-termination-grace-period", "1s")
	testkit.ConfigureAPIServer(testEnv)
	restConfig, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "start envtest; run `make envtest` or set KUBEBUILDER_ASSETS")
	DeferCleanup(testEnv.Stop)
	k8sClient, err = client.New(restConfig, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())

	kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(testkit.WriteKubeconfig(testEnv, envtest.User{Name: "e2e-admin", Groups: []string{"system:masters"}}, kubeconfig)).To(Succeed())
})

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr() string {
	addr, err := testkit.FreeAddr()
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return addr
}

// runBinary starts the binary with args and stops it when the spec ends.
func runBinary(args ...string) *gexec.Session {
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	session, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	DeferCleanup(func() { session.Kill().Wait(10 * time.Second) })
	return session
}

// runToExit runs the binary to its end and returns its status and standard error.
func runToExit(args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if exitErr, ok := err.(*exec.ExitError); ok {
		return exitErr.ExitCode(), stderr.String()
	}
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), fmt.Sprintf("stderr: %s", stderr.String()))
	return 0, stderr.String()
}
