// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package testkit holds the helpers the project's tests, demo and benchmark share: one of
// each, instead of a copy per package. It does not import the controllers package, so that
// package's own unit tests can use it too; it implements the gates package's interfaces.
package testkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
)

// Unconfined is the flag the tests, the demo and the bench give an agent that runs where no
// admission policy judges it, as an admin or a test user: confinement is required by default.
const Unconfined = "--require-confinement=false"

// PatientRetry outlasts the conflicts of racing writers in tests, for about a minute and a half if
// it must: on a machine busy with other test packages, a hundred retries (about 15 s) ran out
// once. The wait stays between 20 and 40 ms rather than growing to a Cap: wait.Backoff ends its
// steps once the duration reaches Cap, which made the earlier 1000 steps about 20.
var PatientRetry = wait.Backoff{Steps: 3000, Duration: 20 * time.Millisecond, Factor: 1, Jitter: 1}

// PatchNode changes the Node name, read through reader, with one merge patch sent through
// writer and locked to the resourceVersion it read, as the controller writes: a concurrent
// change makes it fail with a conflict instead of being overwritten. opts such as client.DryRunAll
// let a test ask for admission's verdict without changing the Node.
func PatchNode(ctx context.Context, reader client.Reader, writer client.Client, name string, change func(*corev1.Node), opts ...client.PatchOption) error {
	node := &corev1.Node{}
	if err := reader.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	orig := node.DeepCopy()
	change(node)
	return writer.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), opts...)
}

// UpdateNode changes the Node name as another writer racing the controller would: PatchNode,
// retried on conflicts with PatientRetry.
func UpdateNode(ctx context.Context, c client.Client, name string, change func(*corev1.Node)) error {
	return retry.RetryOnConflict(PatientRetry, func() error { return PatchNode(ctx, c, c, name, change) })
}

// PatchNodeStatus changes the Node name's status as kubelet writes it, through the status
// subresource, locked to the resourceVersion it read and retried on conflicts with PatientRetry.
func PatchNodeStatus(ctx context.Context, c client.Client, name string, change func(*corev1.Node)) error {
	return retry.RetryOnConflict(PatientRetry, func() error {
		node := &corev1.Node{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
			return err
		}
		orig := node.DeepCopy()
		change(node)
		return c.Status().Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	})
}

// AlwaysReady is a readiness gate that always passes, for tests about the API side.
type AlwaysReady struct{}

// Name names the gate.
func (AlwaysReady) Name() string { return "test" }

// Check always passes.
func (AlwaysReady) Check(context.Context, gates.Input) error { return nil }

// Timeout makes it a probed gate (gates.Probed).
func (AlwaysReady) Timeout() time.Duration { return 0 }

// Switch is a readiness gate whose result the test sets; it starts passing.
type Switch struct{ off atomic.Bool }

// Name names the gate.
func (*Switch) Name() string { return "switch" }

// Timeout makes it a probed gate (gates.Probed).
func (*Switch) Timeout() time.Duration { return 0 }

// Check passes unless the switch is off.
func (s *Switch) Check(context.Context, gates.Input) error {
	if s.off.Load() {
		return errors.New("switched off")
	}
	return nil
}

// Set turns the gate on (passing) or off.
func (s *Switch) Set(on bool) { s.off.Store(!on) }

// EqualTaints reports whether a and b are the same taints in the same order, values included
// and the times they were added ignored.
func EqualTaints(a, b []corev1.Taint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].MatchTaint(&b[i]) || a[i].Value != b[i].Value {
			return false
		}
	}
	return true
}

// EventCount counts the events recorded about the Node named node with reason (any reason when
// empty), each series by its count. Events about Nodes are in the default namespace.
func EventCount(ctx context.Context, c client.Reader, node, reason string) (int, error) {
	list := &eventsv1.EventList{}
	if err := c.List(ctx, list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range list.Items {
		if e.Regarding.Kind != "Node" || e.Regarding.Name != node || (reason != "" && e.Reason != reason) {
			continue
		}
		if e.Series != nil {
			n += int(e.Series.Count)
		} else {
			n++
		}
	}
	return n, nil
}

// EventNotes returns the notes of the events recorded about the Node named node with reason, in
// the order the API server lists them.
func EventNotes(ctx context.Context, c client.Reader, node, reason string) ([]string, error) {
	list := &eventsv1.EventList{}
	if err := c.List(ctx, list, client.InNamespace(metav1.NamespaceDefault)); err != nil {
		return nil, err
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Reason == reason {
			out = append(out, e.Note)
		}
	}
	return out, nil
}

// EnvtestBinary returns the path of a binary hack/envtest builds beside the envtest binaries
// (KUBEBUILDER_ASSETS): kubemark, kube-scheduler or kube-controller-manager; KUBEMARK, when set,
// names another minor's kubemark. Its error says how to build it.
func EnvtestBinary(name string) (string, error) {
	if path := os.Getenv("KUBEMARK"); name == "kubemark" && path != "" {
		// Another minor's kubelet (make test-kubelet-skew).
		return path, nil
	}
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		return "", errors.New("KUBEBUILDER_ASSETS is not set: run the tests through make, or set it")
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("no %s at %s: run `make envtest`: %w", name, path, err)
	}
	return path, nil
}

// FreeAddr returns a loopback address whose port was free a moment ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().String(), nil
}

// InProcess turns manager options (controllers.ManagerOptions, as the binary uses) into those of
// an agent run inside a test or benchmark process: no endpoints of its own, and several agents
// with the same controller may run in the one process.
func InProcess(opts ctrl.Options) ctrl.Options {
	opts.Metrics = metricsserver.Options{BindAddress: "0"}
	opts.HealthProbeBindAddress = "0"
	opts.Controller = config.Controller{SkipNameValidation: ptr.To(true)}
	return opts
}

// StartManager runs a manager with opts (made InProcess) and what setup adds to it, talking to
// the API server through cfg, until the spec ends. The returned channel receives what the
// manager's Start returned.
func StartManager(cfg *rest.Config, opts ctrl.Options, setup func(ctrl.Manager) error) <-chan error {
	ginkgo.GinkgoHelper()
	mgr, err := ctrl.NewManager(cfg, InProcess(opts))
	gomega.Expect(err).NotTo(gomega.HaveOccurred())
	gomega.Expect(setup(mgr)).To(gomega.Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	done, stopped := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(stopped)
		done <- mgr.Start(ctx)
	}()
	ginkgo.DeferCleanup(func() {
		cancel()
		gomega.Eventually(stopped, 10*time.Second).Should(gomega.BeClosed())
	})
	return done
}

// WriteKubeconfig writes, at path, a kubeconfig with which a process acts as user against env's
// API server: the admin of a test, a kubelet, the kubectl plugin's reader.
func WriteKubeconfig(env *envtest.Environment, user envtest.User, path string) error {
	u, err := env.AddUser(user, nil)
	if err != nil {
		return fmt.Errorf("adding user %s: %w", user.Name, err)
	}
	data, err := u.KubeConfig()
	if err != nil {
		return fmt.Errorf("the kubeconfig of user %s: %w", user.Name, err)
	}
	return os.WriteFile(path, data, 0o600)
}

// StartEnvtest starts an envtest API server and etcd for a plain Go test, stops them when it
// ends, and returns them with a client of the admin. Its failure says how to get the binaries.
func StartEnvtest(t testing.TB) (*envtest.Environment, client.Client) {
	t.Helper()
	env := &envtest.Environment{}
	ConfigureAPIServer(env)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("start envtest (make envtest, or set KUBEBUILDER_ASSETS): %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return env, c
}

// DashboardPanel is one panel of the Grafana dashboard, config/grafana/dashboard.json: its title
// and its PromQL queries, as Grafana holds them.
type DashboardPanel struct {
	Title   string
	Targets []struct{ Expr string }
}

// DashboardPanels reads the panels of the Grafana dashboard at path.
func DashboardPanels(path string) ([]DashboardPanel, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var d struct{ Panels []DashboardPanel }
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d.Panels, nil
}
