// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"context"
	"fmt"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// On a new node pool every node carries the startup taints, so what a node agent needs must
// tolerate them. The chart's MutatingAdmissionPolicies (config/components/tolerate-startup-taints)
// make the pods and DaemonSets created in a namespace the cluster admin labels tolerate each
// taint, once, and touch nothing anywhere else.
var _ = Describe("the startup taints tolerated in a labelled namespace", Ordered, func() {
	if !testkit.ServesMinor(startuptaint.TaintAtRegistrationMinor) {
		return // MutatingAdmissionPolicy v1 is served from the minor taint at registration needs
	}
	// Two groups, one taint with an effect and one without, as a render joins them.
	release := &chartRelease{name: "tolerate", namespace: "tolerate", values: []string{"testdata/tolerate-values.yaml"}}
	var (
		objs []*unstructured.Unstructured
		seq  int
	)
	want := []corev1.Toleration{
		{Key: "a.example.com/agent-not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: "b.example.com/agent-not-ready", Operator: corev1.TolerationOpExists},
	}
	namespace := func(ctx context.Context, labelled bool) string {
		GinkgoHelper()
		seq++
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tolerate-%d", seq)}}
		if labelled {
			ns.Labels = map[string]string{startuptaint.TolerateLabel: "true"}
		}
		Expect(k8sClient.Create(ctx, ns)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, ns))).To(Succeed()) })
		return ns.Name
	}
	pod := func(ctx context.Context, ns string, tolerations ...corev1.Toleration) []corev1.Toleration {
		GinkgoHelper()
		seq++
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%d", seq)},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}, Tolerations: tolerations}}
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		return p.Spec.Tolerations
	}

	// once matches tolerations that hold each of want exactly once: other installs' policies in the
	// same API server add their own taints' beside them.
	once := func(want ...corev1.Toleration) OmegaMatcher {
		matchers := make([]OmegaMatcher, 0, len(want))
		for _, t := range want {
			matchers = append(matchers, WithTransform(func(got []corev1.Toleration) int {
				n := 0
				for _, g := range got {
					if g == t {
						n++
					}
				}
				return n
			}, Equal(1)))
		}
		return And(matchers...)
	}

	BeforeAll(func(ctx SpecContext) {
		objs = release.render(chartDir)
		Expect(suffixed[admissionv1.MutatingAdmissionPolicy](objs, "MutatingAdmissionPolicy", "-tolerate-startup-taints-pods")).NotTo(BeNil())
		applyUntilDone(ctx, objs)
		// The API server picks a new policy up shortly after it is created.
		ns := namespace(ctx, true)
		Eventually(func() []corev1.Toleration { return pod(ctx, ns) }).Should(once(want...))
	})

	It("adds a toleration of each startup taint to a pod, and none that one already tolerates", func(ctx SpecContext) {
		ns := namespace(ctx, true)
		own := corev1.Toleration{Key: "example.com/other", Operator: corev1.TolerationOpEqual, Value: "v", Effect: corev1.TaintEffectNoSchedule}
		Expect(pod(ctx, ns, own)).To(once(append([]corev1.Toleration{own}, want...)...))
		Expect(pod(ctx, ns, want[0])).To(once(want...), "one already there is not doubled")
		all := corev1.Toleration{Operator: corev1.TolerationOpExists}
		Expect(pod(ctx, ns, all)).To(Equal([]corev1.Toleration{all}), "a pod that tolerates every taint needs none")
		// NoSchedule does not tolerate a NoExecute taint, nor one without an effect in the render.
		noSchedule := corev1.Toleration{Key: "b.example.com/agent-not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
		Expect(pod(ctx, ns, noSchedule)).To(once(noSchedule, want[0], want[1]))
	})

	It("leaves a mirror pod, and a pod past its bound of 256 tolerations, as they are written", func(ctx SpecContext) {
		ns := namespace(ctx, true)
		// kubelet's copy of a static pod: its spec must stay the static pod's.
		seq++
		mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("mirror-%d", seq),
			Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "hash"}},
			Spec: corev1.PodSpec{NodeName: "somewhere", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		Expect(k8sClient.Create(ctx, mirror)).To(Succeed())
		Expect(mirror.Spec.Tolerations).NotTo(ContainElement(HaveField("Key", HaveSuffix("example.com/agent-not-ready"))))
		many := make([]corev1.Toleration, 257)
		for i := range many {
			many[i] = corev1.Toleration{Key: fmt.Sprintf("example.com/t%d", i), Operator: corev1.TolerationOpExists}
		}
		Expect(pod(ctx, ns, many...)).NotTo(ContainElement(HaveField("Key", HaveSuffix("example.com/agent-not-ready"))),
			"the policy's cost stays bounded: nothing added")
	})

	It("touches no pod in a namespace that is not labelled", func(ctx SpecContext) {
		// The API server's DefaultTolerationSeconds adds its own there.
		Expect(pod(ctx, namespace(ctx, false))).NotTo(ContainElement(HaveField("Key", HaveSuffix("example.com/agent-not-ready"))))
	})

	It("makes a DaemonSet's pod template tolerate them, on create and on update", func(ctx SpecContext) {
		ns := namespace(ctx, true)
		labels := map[string]string{"app": "typha"}
		ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "agent"}, Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}}}
		Expect(k8sClient.Create(ctx, ds)).To(Succeed())
		Expect(ds.Spec.Template.Spec.Tolerations).To(once(want...))
		ds.Spec.Template.Spec.Tolerations = nil
		Expect(k8sClient.Update(ctx, ds)).To(Succeed())
		Expect(ds.Spec.Template.Spec.Tolerations).To(once(want...), "an update that drops them gets them back")

		other := ds.DeepCopy()
		other.ObjectMeta = metav1.ObjectMeta{Namespace: namespace(ctx, false), Name: "agent"}
		other.Spec.Template.Spec.Tolerations = nil
		Expect(k8sClient.Create(ctx, other)).To(Succeed())
		Expect(other.Spec.Template.Spec.Tolerations).To(BeEmpty(), "nothing outside a labelled namespace")
	})

	// A half-done uninstall: the policies gone, their bindings left behind. Nothing is refused,
	// and nothing is added any more.
	It("blocks no pod once its policies are deleted and their bindings left", func(ctx SpecContext) {
		for _, o := range objs {
			if o.GetKind() == "MutatingAdmissionPolicy" && strings.Contains(o.GetName(), "tolerate-startup-taints") {
				Expect(deleteObject(ctx, o)).To(Succeed())
			}
		}
		ns := namespace(ctx, true)
		Eventually(func() []corev1.Toleration { return pod(ctx, ns) }).
			ShouldNot(ContainElement(HaveField("Key", HavePrefix("a.example.com/"))))
	})
})

// The agent's pod must start on a node that carries the taints it removes, or no node is ever
// released: its DaemonSet tolerates each, in every install and sample.
var _ = Describe("the agent's own DaemonSet", Label(testkit.RenderOnly), func() {
	It("tolerates every startup taint it removes, in every install and sample", func() {
		for _, in := range allInstalls() {
			objs := in.render()
			a := agentOf(objs)
			for _, ds := range only[appsv1.DaemonSet](objs, "DaemonSet") {
				if !slices.ContainsFunc(ds.Spec.Template.Spec.Containers, func(c corev1.Container) bool { return c.Name == "startup-taint-remover" }) {
					continue
				}
				Expect(startuptaint.Untolerated(ds.Spec.Template.Spec.Tolerations, startuptaint.Taints(a.taints))).To(BeEmpty(), in.name)
			}
		}
	})
})
