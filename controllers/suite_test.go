// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

var (
	cfg       *rest.Config
	k8sClient client.Client
	testEnv   *envtest.Environment
	nodeSeq   atomic.Int64
)

var _ = ReportAfterSuite("timings", testkit.ReportTimings)

func TestControllers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Controllers Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
	SetDefaultConsistentlyDuration(2 * time.Second)
	SetDefaultConsistentlyPollingInterval(100 * time.Millisecond)
	testEnv = &envtest.Environment{}
	testkit.ConfigureAPIServer(testEnv)
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "start envtest; run `make envtest` or set KUBEBUILDER_ASSETS")
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

const driverName = "ebs.csi.example.com"

// startupTaint is the default taint of driverName.
var startupTaint = corev1.Taint{Key: driverName + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute}

// uniqueNodeName gives each spec its own Node, since Nodes outlive the specs in one API server.
func uniqueNodeName() string {
	return fmt.Sprintf("node-%d-%d", GinkgoParallelProcess(), nodeSeq.Add(1))
}

func createNode(ctx context.Context, name string, taints ...corev1.Taint) *corev1.Node {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: taints},
	}
	ExpectWithOffset(1, k8sClient.Create(ctx, node)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) {
		ExpectWithOffset(1, client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed())
	})
	return node
}

// registerDriver does what kubelet does when it registers a CSI plugin: it lists the driver in the
// node's CSINode, with an attach limit when count is not nil.
func registerDriver(ctx context.Context, nodeName string, count *int32) {
	entry := storagev1.CSINodeDriver{Name: driverName, NodeID: nodeName}
	if count != nil {
		entry.Allocatable = &storagev1.VolumeNodeResources{Count: count}
	}
	csiNode := &storagev1.CSINode{}
	err := k8sClient.Get(ctx, client.ObjectKey{Name: nodeName}, csiNode)
	if apierrors.IsNotFound(err) {
		csiNode = &storagev1.CSINode{
			ObjectMeta: metav1.ObjectMeta{Name: nodeName},
			Spec:       storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{entry}},
		}
		ExpectWithOffset(1, k8sClient.Create(ctx, csiNode)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			ExpectWithOffset(1, client.IgnoreNotFound(k8sClient.Delete(ctx, csiNode))).To(Succeed())
		})
		return
	}
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	csiNode.Spec.Drivers = []storagev1.CSINodeDriver{entry}
	ExpectWithOffset(1, k8sClient.Update(ctx, csiNode)).To(Succeed())
}

// startDriver serves a fake CSI driver on a socket in a fresh temporary directory.
func startDriver(r fakecsi.Readiness) *fakecsi.Driver {
	d, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, r)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	DeferCleanup(d.Stop)
	return d
}

// csiGate returns a gate for the socket at path, probed with a short timeout.
func csiGate(path string) *gates.CSIGate {
	g, err := gates.NewCSIGate(path, 500*time.Millisecond)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	DeferCleanup(g.Close)
	return g
}

// startManager runs r in its own manager, whose cache holds only r's node, until the spec ends.
func startManager(r *controllers.NodeReconciler) {
	GinkgoHelper()
	startManagerAs(cfg, logf.Log, r)
}

// startManagerAs runs r like startManager, talking to the API server through restCfg and
// logging to logger, in a manager configured as the binary's is.
func startManagerAs(restCfg *rest.Config, logger logr.Logger, r *controllers.NodeReconciler) {
	GinkgoHelper()
	if r.ProbeInterval == 0 {
		r.ProbeInterval = 100 * time.Millisecond
	}
	opts := r.ManagerOptions()
	opts.Logger = logger
	testkit.StartManager(restCfg, opts, r.SetupWithManager)
}

// nodeTaints reads the node's taints from the API server, less the node.kubernetes.io/not-ready
// taint that the API server's TaintNodesByCondition admission adds to every new Node.
func nodeTaints(g Gomega, ctx context.Context, name string) []corev1.Taint {
	node := &corev1.Node{}
	g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
	return startuptaint.WithoutTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: corev1.TaintNodeNotReady}})
}

// hasTaintKey matches a taint list that holds a taint with key.
func hasTaintKey(key string) OmegaMatcher {
	return ContainElement(HaveField("Key", key))
}

// nodeEvents returns the reasons of the events recorded on the node, in order of creation.
func nodeEvents(g Gomega, ctx context.Context, nodeName string) []string {
	list := &eventsv1.EventList{}
	g.Expect(k8sClient.List(ctx, list, client.InNamespace("default"))).To(Succeed())
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == nodeName {
			reasons = append(reasons, e.Reason)
		}
	}
	return reasons
}

// eventOccurrences counts the events recorded on the node with reason (any when empty), each
// series by its count.
func eventOccurrences(g Gomega, ctx context.Context, nodeName, reason string) int {
	n, err := testkit.EventCount(ctx, k8sClient, nodeName, reason)
	g.Expect(err).NotTo(HaveOccurred())
	return n
}

func readdTaint(ctx context.Context, nodeName string, t corev1.Taint) {
	ExpectWithOffset(1, testkit.UpdateNode(ctx, k8sClient, nodeName, func(node *corev1.Node) {
		node.Spec.Taints = append(node.Spec.Taints, t)
	})).To(Succeed())
}

// reconciles is how many reconciles the controllers named startup-taint have finished.
func reconciles() float64 {
	families, err := crmetrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == "startup-taint" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}
