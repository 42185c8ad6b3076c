// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package manifests renders the shipped kustomize configurations with the kustomize Go API,
// applies each to an envtest API server, and checks what it grants, what its admission policy
// denies, and that removing it never blocks anyone else.
package manifests

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// podPreemptionMinor is the first minor of Kubernetes 1.x with spec.podPreemptionPolicy, a field of
// a Node the admission policy names nowhere.
const podPreemptionMinor = 37

var (
	cfg       *rest.Config
	k8sClient client.Client
	// kubeconfig is an admin's, for the tools a user runs (kubectl).
	kubeconfig string
	testEnv    *envtest.Environment
)

var _ = ReportAfterSuite("timings", testkit.ReportTimings)

func TestManifests(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Manifests Suite")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	testEnv = &envtest.Environment{}
	testkit.ConfigureAPIServer(testEnv)
	if testkit.ServesMinor(podPreemptionMinor) {
		// spec.podPreemptionPolicy is an alpha field of 1.37: with its gate on, the policy must
		// refuse a change of it although it names no such field.
		testEnv.ControlPlane.GetAPIServer().Configure().
			Append("feature-gates", "InPlacePodVerticalScalingSchedulerPreemption=true")
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "start envtest; run `make envtest` or set KUBEBUILDER_ASSETS")
	DeferCleanup(testEnv.Stop)
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	kubeconfig = filepath.Join(GinkgoT().TempDir(), "kubeconfig")
	Expect(testkit.WriteKubeconfig(testEnv, envtest.User{Name: "admin", Groups: []string{"system:masters"}}, kubeconfig)).To(Succeed())
})

// render builds a kustomization directory with the kustomize Go API, as `kustomize build` does.
func render(dir string) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := rendered("kustomize\x00"+dir, func() ([]*unstructured.Unstructured, error) { return objects.FromKustomization(dir) })
	Expect(err).NotTo(HaveOccurred())
	return objs
}

// renders keeps each render of the run by what made it: many specs render the same installs, a
// render is a kustomize run or a process of the chart tool, and its output never changes within a
// run. Each caller gets copies of its own, to change as it likes.
var renders = struct {
	sync.Mutex
	byKey map[string][]*unstructured.Unstructured
}{byKey: map[string][]*unstructured.Unstructured{}}

// rendered returns copies of key's render, made once with do.
func rendered(key string, do func() ([]*unstructured.Unstructured, error)) ([]*unstructured.Unstructured, error) {
	renders.Lock()
	objs, ok := renders.byKey[key]
	renders.Unlock()
	if !ok {
		var err error
		if objs, err = do(); err != nil {
			return nil, err
		}
		renders.Lock()
		renders.byKey[key] = objs
		renders.Unlock()
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	return out, nil
}

// only returns the rendered objects of kind, converted to their typed form T.
func only[T any](objs []*unstructured.Unstructured, kind string) []*T {
	GinkgoHelper()
	var out []*T
	for _, obj := range objs {
		if obj.GetKind() != kind {
			continue
		}
		typed := new(T)
		Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, typed)).To(Succeed())
		out = append(out, typed)
	}
	return out
}

// impersonating returns a client acting as user, with the claims a service-account token bound to
// a pod on node carries when node is not empty.
func impersonating(user string, groups []string, node string) client.Client {
	GinkgoHelper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	if node != "" {
		c.Impersonate.Extra = testkit.PodTokenExtra(context.Background(), k8sClient, node)
	}
	cl, err := client.New(c, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}

// serviceAccount is the identity of a pod running as namespace/name.
func serviceAccount(namespace, name string) (user string, groups []string) {
	return "system:serviceaccount:" + namespace + ":" + name,
		[]string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
}

// kubelet returns a client acting as the kubelet of node, with the rights the Node authorizer
// gives it (envtest runs RBAC only, so the bootstrap system:node role stands in for it).
func kubelet(ctx context.Context, node string) client.Client {
	GinkgoHelper()
	user := "system:node:" + node
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-kubelet-" + node},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}},
	}
	Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, binding))).To(Succeed())
	kc := impersonating(user, []string{"system:nodes", "system:authenticated"}, "")
	// The RBAC authorizer sees a new binding a moment after it is created: wait until a read of
	// the Node is answered (found or not) rather than refused.
	Eventually(func() error {
		return client.IgnoreNotFound(kc.Get(ctx, client.ObjectKey{Name: node}, &corev1.Node{}))
	}).WithPolling(10 * time.Millisecond).Should(Succeed())
	// Its writes are kubelet's in managedFields, as the real kubelet's are.
	return client.WithFieldOwner(kc, "kubelet")
}

// kubeletKubeconfig writes a kubeconfig with node's kubelet identity (system:node:NODE, in
// system:nodes), with the rights kubelet() grants, for a hollow kubelet process.
func kubeletKubeconfig(ctx context.Context, node string) string {
	GinkgoHelper()
	kubelet(ctx, node)
	path := filepath.Join(GinkgoT().TempDir(), node+".kubeconfig")
	Expect(testkit.WriteKubeconfig(testEnv, envtest.User{Name: "system:node:" + node, Groups: []string{"system:nodes"}}, path)).To(Succeed())
	return path
}

// patchNode changes a Node through c the way the controller does: a merge patch locked to the
// resourceVersion that the admin client read.
func patchNode(ctx context.Context, c client.Client, name string, change func(*corev1.Node), opts ...client.PatchOption) error {
	return testkit.PatchNode(ctx, k8sClient, c, name, change, opts...)
}

// refusedOnceLoaded waits until the agent's patch of node, as a dry run, gets an error matching
// matcher: a policy just created is judged only once the API server has loaded it, and a dry run
// admitted before that changes nothing the next attempt, or the next spec, relies on.
func refusedOnceLoaded(ctx context.Context, c client.Client, node string, change func(*corev1.Node), matcher types.GomegaMatcher, what ...any) {
	GinkgoHelper()
	Eventually(func() error { return patchNode(ctx, c, node, change, client.DryRunAll) }).Should(MatchError(matcher), what...)
}

// nodeWritesWork checks that a kubelet can register its Node with a startup taint and write its
// status, and that an admin can label and cordon it: the writes the admission policy must never
// block, whatever state an install is in.
func nodeWritesWork(ctx context.Context, name string) {
	GinkgoHelper()
	kc := kubelet(ctx, name)
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}}},
	}
	Expect(kc.Create(ctx, node)).To(Succeed(), "kubelet registers its Node")
	defer func() { Expect(k8sClient.Delete(ctx, node)).To(Succeed()) }()
	orig := node.DeepCopy()
	now := metav1.Now()
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		Reason: "KubeletReady", LastHeartbeatTime: now, LastTransitionTime: now}}
	Expect(kc.Status().Patch(ctx, node, client.MergeFrom(orig))).To(Succeed(), "kubelet writes its node status")
	Expect(patchNode(ctx, kc, name, func(n *corev1.Node) {
		n.Annotations = map[string]string{"node.alpha.kubernetes.io/ttl": "0"}
	})).To(Succeed(), "kubelet annotates its Node")
	Expect(patchNode(ctx, k8sClient, name, func(n *corev1.Node) {
		n.Labels = map[string]string{"example.com/pool": "a"}
		n.Spec.Unschedulable = true
	})).To(Succeed(), "an admin labels and cordons the Node")
}
