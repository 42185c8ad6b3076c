package manifests

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
)

// agent is the identity of the rendered DaemonSet's pods.
type agent struct {
	user   string
	groups []string
	taints []controllers.TaintSpec
}

func renderedAgent() agent {
	GinkgoHelper()
	sa := find("ServiceAccount", "controller")
	params := find("ConfigMap", "params")
	taints, found, err := unstructured.NestedString(params.Object, "data", "taints")
	Expect(err).NotTo(HaveOccurred())
	Expect(found).To(BeTrue(), "the params ConfigMap has data.taints")
	items := strings.Split(taints, ",")
	specs := make([]controllers.TaintSpec, 0, len(items))
	for _, t := range items {
		spec, err := controllers.ParseTaintSpec(t)
		Expect(err).NotTo(HaveOccurred())
		specs = append(specs, spec)
	}
	ns := sa.GetNamespace()
	return agent{
		user:   fmt.Sprintf("system:serviceaccount:%s:%s", ns, sa.GetName()),
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		taints: specs,
	}
}

// patchNode changes a Node through c the way the controller does: a merge patch locked to the
// resourceVersion it read.
func patchNode(ctx context.Context, c client.Client, name string, change func(*corev1.Node)) error {
	node := &corev1.Node{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	orig := node.DeepCopy()
	change(node)
	return c.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

var _ = Describe("the shipped RBAC and admission policy", Ordered, func() {
	var (
		a       agent
		startup corev1.Taint
		other   = corev1.Taint{Key: "example.com/other", Value: "x", Effect: corev1.TaintEffectNoSchedule}
		seq     int
	)

	newNode := func(ctx context.Context) string {
		seq++
		name := fmt.Sprintf("policy-node-%d", seq)
		node := &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "a"}, Annotations: map[string]string{"note": "n"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{startup, other}},
		}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
		return name
	}
	removeStartup := func(n *corev1.Node) { n.Spec.Taints = controllers.WithoutTaints(n.Spec.Taints, a.taints) }

	BeforeAll(func(ctx SpecContext) {
		a = renderedAgent()
		startup = corev1.Taint{Key: a.taints[0].Key, Effect: corev1.TaintEffectNoExecute}

		// The API server picks the policy up shortly after it is created; until then RBAC alone
		// rules. (Its type-checking status is written by kube-controller-manager, which envtest
		// does not run: the specific denial messages below show that each expression evaluates.)
		probe := newNode(ctx)
		Eventually(func() error {
			return patchNode(ctx, impersonating(a.user, a.groups, "elsewhere"), probe, removeStartup)
		}).Should(MatchError(ContainSubstring("may only change its own Node")))
	})

	It("lets the real controller, with only the agent's identity, remove its own startup taint", func(ctx SpecContext) {
		name := newNode(ctx)
		agentCfg := rest.CopyConfig(cfg)
		agentCfg.Impersonate = rest.ImpersonationConfig{UserName: a.user, Groups: a.groups,
			Extra: map[string][]string{"authentication.kubernetes.io/node-name": {name}}}
		mgr, err := ctrl.NewManager(agentCfg, ctrl.Options{
			Scheme: scheme.Scheme, Cache: controllers.CacheOptions(name),
			Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		})
		Expect(err).NotTo(HaveOccurred())
		Expect((&controllers.NodeReconciler{NodeName: name, Taints: a.taints, Gates: []controllers.Gate{alwaysReady{}},
			ProbeInterval: 100 * time.Millisecond}).SetupWithManager(mgr)).To(Succeed())
		mgrCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(done)
			Expect(mgr.Start(mgrCtx)).To(Succeed())
		}()
		DeferCleanup(func() { cancel(); Eventually(done).Should(BeClosed()) })

		Eventually(func(g Gomega) {
			node := &corev1.Node{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
			g.Expect(controllers.MatchingTaints(node.Spec.Taints, a.taints)).To(BeEmpty())
			g.Expect(node.Spec.Taints).To(ContainElement(other))
		}).Should(Succeed())
	})

	// Each forbidden request is made on a node of its own whose name the token claims.
	type request struct {
		name string
		do   func(ctx context.Context, c client.Client, own string) error
		// denial is a part of the expected message: the policy's own words where RBAC allows the
		// request, RBAC's where it does not.
		denial string
	}
	const (
		otherNode  = "may only change its own Node"
		taintsOnly = "may only remove its startup taints"
		metadata   = "may not change a Node's labels, annotations"
		specOnly   = "may not change a Node's spec"
		rbac       = "cannot"
	)
	requests := []request{
		{"patching another node", func(ctx context.Context, c client.Client, own string) error {
			foreign := newNode(ctx)
			return patchNode(ctx, c, foreign, removeStartup)
		}, otherNode},
		{"removing another taint", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) {
				n.Spec.Taints = controllers.WithoutTaints(n.Spec.Taints, []controllers.TaintSpec{{Key: other.Key}})
			})
		}, taintsOnly},
		{"adding a taint", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/new", Effect: corev1.TaintEffectNoSchedule})
			})
		}, taintsOnly},
		{"re-adding its own startup taint", func(ctx context.Context, c client.Client, own string) error {
			if err := patchNode(ctx, k8sClient, own, removeStartup); err != nil {
				return err
			}
			return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, startup) })
		}, taintsOnly},
		{"changing a taint's effect", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.Taints[0].Effect = corev1.TaintEffectNoSchedule })
		}, taintsOnly},
		{"changing a taint's value", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.Taints[1].Value = "changed" })
		}, taintsOnly},
		{"changing a label", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) { removeStartup(n); n.Labels["zone"] = "b" })
		}, metadata},
		{"changing an annotation", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) { removeStartup(n); n.Annotations["extra"] = "x" })
		}, metadata},
		{"cordoning the node", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.Unschedulable = true })
		}, specOnly},
		{"setting podCIDR", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.PodCIDR = "10.0.0.0/24" })
		}, specOnly},
		{"setting providerID", func(ctx context.Context, c client.Client, own string) error {
			return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.ProviderID = "example://x" })
		}, specOnly},
		{"writing the status", func(ctx context.Context, c client.Client, own string) error {
			node := &corev1.Node{}
			if err := k8sClient.Get(ctx, client.ObjectKey{Name: own}, node); err != nil {
				return err
			}
			orig := node.DeepCopy()
			node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{
				Type: "Example", Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()})
			return c.Status().Patch(ctx, node, client.MergeFrom(orig))
		}, rbac},
		{"deleting the node", func(ctx context.Context, c client.Client, own string) error {
			return c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: own}})
		}, rbac},
		{"creating a node", func(ctx context.Context, c client.Client, own string) error {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: own + "-twin"}}
			err := c.Create(ctx, node)
			if err == nil {
				DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
			}
			return err
		}, rbac},
	}

	for _, req := range requests {
		It("denies the agent "+req.name, func(ctx SpecContext) {
			own := newNode(ctx)
			err := req.do(ctx, impersonating(a.user, a.groups, own), own)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
			Expect(err.Error()).To(ContainSubstring(req.denial))
		})
		It("lets another identity "+req.name, func(ctx SpecContext) {
			own := newNode(ctx)
			Expect(req.do(ctx, k8sClient, own)).To(Succeed())
		})
	}

	It("denies the agent's own removal without the node-name claim, and allows it with the claim", func(ctx SpecContext) {
		own := newNode(ctx)
		err := patchNode(ctx, impersonating(a.user, a.groups, ""), own, removeStartup)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
		Expect(err.Error()).To(ContainSubstring("carries no node name"))
		Expect(patchNode(ctx, impersonating(a.user, a.groups, own), own, removeStartup)).To(Succeed())
	})
})

// alwaysReady is a gate that always passes: these tests are about what the agent may write.
type alwaysReady struct{}

func (alwaysReady) Name() string                { return "test" }
func (alwaysReady) Probe(context.Context) error { return nil }
