// Package manifests renders the shipped kustomize configuration with the kustomize Go API, applies
// it to an envtest API server, and checks what it grants and what its admission policy denies.
package manifests

import (
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

var (
	cfg       *rest.Config
	k8sClient client.Client
	rendered  []*unstructured.Unstructured
)

func TestManifests(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Manifests Suite")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	testEnv := &envtest.Environment{}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred(), "start envtest; run `make envtest` or set KUBEBUILDER_ASSETS")
	DeferCleanup(testEnv.Stop)
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())

	Expect(render("../../config/policy")).NotTo(BeEmpty())
	rendered = render("../../config/default")
	for _, obj := range rendered {
		Expect(k8sClient.Create(ctx, obj)).To(Succeed(), "create %s %s", obj.GetKind(), obj.GetName())
	}
})

// render builds a kustomization directory with the kustomize Go API, as `kustomize build` does.
func render(dir string) []*unstructured.Unstructured {
	GinkgoHelper()
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	Expect(err).NotTo(HaveOccurred())
	out := make([]*unstructured.Unstructured, 0, len(resMap.Resources()))
	for _, res := range resMap.Resources() {
		data, err := res.AsYAML()
		Expect(err).NotTo(HaveOccurred())
		obj := &unstructured.Unstructured{}
		Expect(yaml.Unmarshal(data, &obj.Object)).To(Succeed())
		out = append(out, obj)
	}
	return out
}

// find returns the rendered object of kind whose name ends with suffix.
func find(kind, suffix string) *unstructured.Unstructured {
	GinkgoHelper()
	for _, obj := range rendered {
		if obj.GetKind() == kind && len(obj.GetName()) >= len(suffix) && obj.GetName()[len(obj.GetName())-len(suffix):] == suffix {
			return obj
		}
	}
	Fail("no rendered " + kind + " named *" + suffix)
	return nil
}

// impersonating returns a client acting as user, with the node-name claim a pod-bound
// service-account token carries when node is not empty.
func impersonating(user string, groups []string, node string) client.Client {
	GinkgoHelper()
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	if node != "" {
		c.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {node}}
	}
	cl, err := client.New(c, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	return cl
}
