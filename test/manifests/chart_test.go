// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// chartDir is the Helm chart, relative to this package.
const chartDir = "../../charts/startup-taint-remover"

// chartRelease renders a chart as a release, with values files applied in order, then sets.
type chartRelease struct {
	name, namespace string
	values          []string
	// sets are KEY=VALUE pairs, as helm --set takes them.
	sets []string
}

var (
	chartToolOnce sync.Once
	chartToolPath string
	chartToolErr  error
)

// chartTool is the path of the hack/chart command, which renders charts with the Helm Go SDK (a
// module of its own, so the SDK stays out of the main go.mod): CHART_TOOL, which make sets, or
// a build of it.
func chartTool() string {
	GinkgoHelper()
	chartToolOnce.Do(func() {
		if chartToolPath = os.Getenv("CHART_TOOL"); chartToolPath != "" {
			return
		}
		dir, err := os.MkdirTemp("", "chart-tool")
		if err != nil {
			chartToolErr = err
			return
		}
		chartToolPath = filepath.Join(dir, "chart")
		out, err := exec.Command("go", "build", "-C", "../../hack/chart", "-o", chartToolPath, ".").CombinedOutput()
		if err != nil {
			chartToolErr = fmt.Errorf("building hack/chart: %w: %s", err, out)
		}
	})
	Expect(chartToolErr).NotTo(HaveOccurred())
	return chartToolPath
}

// render renders the chart in dir, as `helm install --create-namespace` would install it: the
// release's Namespace first, then the chart's objects.
func (r *chartRelease) render(dir string) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := r.tryRender(dir)
	Expect(err).NotTo(HaveOccurred())
	return objs
}

// tryRender is render for values the chart may refuse: the error carries the chart's message.
func (r *chartRelease) tryRender(dir string) ([]*unstructured.Unstructured, error) {
	args := make([]string, 0, 8+2*len(r.values)+2*len(r.sets))
	args = append(args, "template", dir, "-name", r.name, "-namespace", r.namespace)
	if minor, ok := testkit.EnvtestMinor(); ok {
		// As helm install renders it against this API server: what the chart adds by version follows.
		args = append(args, "-kube-version", fmt.Sprintf("v1.%d.0", minor))
	}
	for _, f := range r.values {
		args = append(args, "-f", f)
	}
	for _, kv := range r.sets {
		args = append(args, "-set", kv)
	}
	return rendered("chart\x00"+strings.Join(args, "\x00"), func() ([]*unstructured.Unstructured, error) {
		cmd := exec.Command(chartTool(), args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("chart %v: %w: %s", args, err, stderr.String())
		}
		ns := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": r.namespace}}}
		objs, err := objects.Decode(out)
		if err != nil {
			return nil, err
		}
		return append([]*unstructured.Unstructured{ns}, objs...), nil
	})
}

// layoutFree is v as JSON with every run of spaces and line breaks made one space. CEL does not
// care, and kustomize re-emits a folded expression's more-indented lines with an extra line break.
func layoutFree(v any) string {
	GinkgoHelper()
	data, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return layout.ReplaceAllString(string(data), " ")
}

// layout is what CEL ignores in a policy's JSON: runs of spaces and escaped line breaks.
var layout = regexp.MustCompile(`(\\n| )+`)

// suffixed returns the object of kind whose name ends in suffix.
func suffixed[T any](objs []*unstructured.Unstructured, kind, suffix string) *T {
	GinkgoHelper()
	var found []*unstructured.Unstructured
	for _, obj := range objs {
		if obj.GetKind() == kind && strings.HasSuffix(obj.GetName(), suffix) {
			found = append(found, obj)
		}
	}
	Expect(found).To(HaveLen(1), "one %s named *%s", kind, suffix)
	return only[T](found, kind)[0]
}

var _ = Describe("the Helm chart and the kustomize tree", Label(testkit.RenderOnly), func() {
	It("render the same RBAC rules, policies and agent container from the same settings", func() {
		kustomized := render("../../config/default")
		charted := (&chartRelease{name: "startup-taint-remover", namespace: "startup-taint-remover-system"}).render(chartDir)

		By("RBAC rules")
		for _, pair := range [][2]string{{"-manager-role", "-manager"}, {"-metrics-auth-role", "-metrics-auth"}, {"-metrics-reader", "-metrics-reader"}} {
			Expect(suffixed[rbacv1.ClusterRole](charted, "ClusterRole", pair[1]).Rules).
				To(Equal(suffixed[rbacv1.ClusterRole](kustomized, "ClusterRole", pair[0]).Rules), "ClusterRole %s", pair[0])
		}
		Expect(only[rbacv1.Role](charted, "Role")).To(BeEmpty(), "no namespaced grant: the chart's pod has no container to gate on")
		Expect(only[rbacv1.Role](kustomized, "Role")).To(BeEmpty())

		By("admission policies")
		for _, name := range []string{"-own-node-only", "-own-node-events"} {
			Expect(layoutFree(suffixed[admissionv1.ValidatingAdmissionPolicy](charted, "ValidatingAdmissionPolicy", name).Spec)).
				To(Equal(layoutFree(suffixed[admissionv1.ValidatingAdmissionPolicy](kustomized, "ValidatingAdmissionPolicy", name).Spec)), name)
			Expect(suffixed[admissionv1.ValidatingAdmissionPolicyBinding](charted, "ValidatingAdmissionPolicyBinding", name).Spec.ValidationActions).
				To(Equal(suffixed[admissionv1.ValidatingAdmissionPolicyBinding](kustomized, "ValidatingAdmissionPolicyBinding", name).Spec.ValidationActions))
		}

		By("the DaemonSet's pod")
		chartPod := only[appsv1.DaemonSet](charted, "DaemonSet")[0].Spec.Template.Spec
		kustomizePod := only[appsv1.DaemonSet](kustomized, "DaemonSet")[0].Spec.Template.Spec
		Expect(chartPod.SecurityContext).To(Equal(kustomizePod.SecurityContext))
		Expect(chartPod.Tolerations).To(Equal(kustomizePod.Tolerations))
		Expect(chartPod.PriorityClassName).To(Equal(kustomizePod.PriorityClassName))
		Expect(chartPod.Volumes).To(Equal(kustomizePod.Volumes))
		Expect(chartPod.Containers).To(HaveLen(1))
		c, k := chartPod.Containers[0], kustomizePod.Containers[0]
		Expect(c.Name).To(Equal(k.Name))
		Expect(c.Args).To(Equal(k.Args))
		Expect(c.Env).To(Equal(k.Env))
		Expect(c.SecurityContext).To(Equal(k.SecurityContext))
		Expect(c.Resources).To(Equal(k.Resources))
		Expect(c.Ports).To(Equal(k.Ports))
		Expect(c.LivenessProbe).To(Equal(k.LivenessProbe))
		Expect(c.ReadinessProbe).To(Equal(k.ReadinessProbe))
		Expect(c.VolumeMounts).To(Equal(k.VolumeMounts))

		By("the metrics Service")
		Expect(suffixed[corev1.Service](charted, "Service", "-metrics").Spec.PublishNotReadyAddresses).To(BeTrue())
		Expect(suffixed[corev1.Service](kustomized, "Service", "-metrics-service").Spec.PublishNotReadyAddresses).To(BeTrue(),
			"an agent that is not ready must still be scraped")

		By("the alert rules, when the Prometheus Operator's objects are asked for")
		monitored := (&chartRelease{name: "startup-taint-remover", namespace: "startup-taint-remover-system",
			sets: []string{"prometheusRule.enabled=true"}}).render(chartDir)
		chartRules := suffixed[unstructured.Unstructured](monitored, "PrometheusRule", "startup-taint-remover")
		kustomizeRules := only[unstructured.Unstructured](render("../../config/prometheus"), "PrometheusRule")
		Expect(kustomizeRules).To(HaveLen(1))
		Expect(layoutFree(chartRules.Object["spec"])).To(Equal(layoutFree(kustomizeRules[0].Object["spec"])))
		Expect(layoutFree(chartRules.Object["spec"])).To(ContainSubstring("startup_taint_removal_refused"))

		By("the crash and toleration policies, which the chart adds where they are served and a kustomize install with their components")
		if testkit.ServesMinor(startuptaint.TaintAtRegistrationMinor) {
			withCrash := render("testdata/crash-overlay")
			for _, policy := range []string{"taint-after-crash", "tolerate-startup-taints-pods", "tolerate-startup-taints-daemonsets"} {
				Expect(layoutFree(suffixed[admissionv1.MutatingAdmissionPolicy](charted, "MutatingAdmissionPolicy", "-"+policy).Spec)).
					To(Equal(layoutFree(suffixed[admissionv1.MutatingAdmissionPolicy](withCrash, "MutatingAdmissionPolicy", policy).Spec)), policy)
			}
			// Each binding names its own render's DaemonSet, the agent's, which the policy reads.
			for _, objs := range [][]*unstructured.Unstructured{charted, withCrash} {
				ds := only[appsv1.DaemonSet](objs, "DaemonSet")
				Expect(ds).To(HaveLen(1))
				Expect(suffixed[admissionv1.MutatingAdmissionPolicyBinding](objs, "MutatingAdmissionPolicyBinding", "taint-after-crash").Spec.ParamRef).
					To(Equal(&admissionv1.ParamRef{Name: ds[0].Name, Namespace: ds[0].Namespace, ParameterNotFoundAction: ptr.To(admissionv1.AllowAction)}))
			}
			for _, o := range withCrash {
				if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") {
					kustomized = append(kustomized, o)
				}
			}
		}

		By("nothing else of the install")
		kinds := func(objs []*unstructured.Unstructured) []string {
			out := make([]string, 0, len(objs))
			for _, o := range objs {
				out = append(out, o.GetKind())
			}
			slices.Sort(out)
			return out
		}
		Expect(kinds(charted)).To(Equal(kinds(kustomized)))
	})
})

var _ = Describe("the Helm chart's kubeVersion", Label(testkit.RenderOnly), func() {
	It("is the oldest minor whose API server applies its policy, and Helm refuses an older cluster", func() {
		below := fmt.Sprintf("v1.%d.13", startuptaint.MinKubernetesMinor-1)
		oldest := fmt.Sprintf("v1.%d.0", startuptaint.MinKubernetesMinor)
		out, err := exec.Command(chartTool(), "template", chartDir, "-kube-version", below).CombinedOutput()
		Expect(err).To(HaveOccurred(), "Helm renders the chart for %s:\n%s", below, out)
		Expect(string(out)).To(ContainSubstring(fmt.Sprintf("chart requires kubeVersion: >=1.%d.0-0 which is incompatible with Kubernetes %s",
			startuptaint.MinKubernetesMinor, below)))
		out, err = exec.Command(chartTool(), "template", chartDir, "-kube-version", oldest).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "%s", out)
	})
})
