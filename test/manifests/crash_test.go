// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"context"
	"fmt"
	"os"
	"regexp"
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
	"github.com/startup-taint-remover/startup-taint-remover/test/workload"
)

// After a crash reboot the node lifecycle controller lifts node.kubernetes.io/unreachable (or
// not-ready) in a write of its own, and the scheduler places pods once both are gone. The chart's
// MutatingAdmissionPolicy (config/components/taint-after-crash) puts the group's first startup key
// back in that very write, where the agent recorded another boot than the Node's; never for
// anyone else's write, and never where the record does not say the Node rebooted.
var _ = Describe("the startup taint after a crash reboot", Ordered, func() {
	if !testkit.ServesMinor(startuptaint.TaintAtRegistrationMinor) {
		return // MutatingAdmissionPolicy v1 is served from the minor taint at registration needs
	}
	const (
		oldBoot, newBoot = "boot-1", "boot-2"
		unreachable      = corev1.TaintNodeUnreachable
	)
	var (
		objs []*unstructured.Unstructured
		a    agent
		seq  int
	)
	release := &chartRelease{name: "crash", namespace: "crash"}
	key := func() string { return a.taints[0].Key }
	back := func() corev1.Taint { return corev1.Taint{Key: key(), Effect: corev1.TaintEffectNoSchedule} }
	// controller is the node lifecycle controller, by its own service account (the controller
	// manager's --use-service-account-credentials) or by the controller manager's identity.
	controller := func(user string) client.Client {
		if user == "node-controller" {
			name, groups := serviceAccount(metav1.NamespaceSystem, "node-controller")
			return impersonating(name, groups, "")
		}
		// Without per-controller credentials its own identity needs every controller's grant, which
		// the bootstrap role system:kube-controller-manager does not carry; a cluster that runs it
		// so grants more (system:masters here).
		return impersonating("system:kube-controller-manager", []string{"system:masters", "system:authenticated"}, "")
	}
	// down creates a Node as the node lifecycle controller leaves a node it found unreachable,
	// with the agent's record and kubelet's boot ID; edit changes it first.
	down := func(ctx context.Context, record, boot string, edit ...func(*corev1.Node)) string {
		GinkgoHelper()
		seq++
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("crash-%d", seq), Annotations: map[string]string{}},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule},
				{Key: unreachable, Effect: corev1.TaintEffectNoSchedule}, {Key: unreachable, Effect: corev1.TaintEffectNoExecute}}}}
		if record != "" {
			n.Annotations[startuptaint.BootAnnotation] = record
		}
		for _, e := range edit {
			if e != nil {
				e(n)
			}
		}
		Expect(k8sClient.Create(ctx, n)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, n))).To(Succeed()) })
		Expect(writeStatus(ctx, k8sClient, n.Name, func(n *corev1.Node) { n.Status.NodeInfo.BootID = boot })).To(Succeed())
		return n.Name
	}
	// lift removes taint key's taints as the controller does, and returns the Node's taints after.
	lift := func(ctx context.Context, c client.Client, node, taintKey string) []corev1.Taint {
		GinkgoHelper()
		Expect(patchNode(ctx, c, node, func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == taintKey })
		})).To(Succeed())
		got := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
		return got.Spec.Taints
	}

	BeforeAll(func(ctx SpecContext) {
		objs = release.render(chartDir)
		Expect(suffixed[admissionv1.MutatingAdmissionPolicy](objs, "MutatingAdmissionPolicy", "-taint-after-crash")).NotTo(BeNil(), "the chart adds it on this minor")
		a = agentOf(objs)
		applyUntilDone(ctx, objs)
		// The API server picks a new policy up shortly after it is created.
		Eventually(func(g Gomega) {
			node := down(ctx, key()+"="+oldBoot, newBoot)
			g.Expect(lift(ctx, controller("node-controller"), node, unreachable)).To(ContainElement(back()))
		}).Should(Succeed())
	})

	DescribeTable("the node lifecycle controller's write that lets pods back",
		func(ctx SpecContext, who string, record func() string, lifted string, edit func(*corev1.Node), puts bool) {
			node := down(ctx, record(), newBoot, edit)
			taints := lift(ctx, controller(who), node, lifted)
			Expect(taints).NotTo(ContainElement(HaveField("Key", lifted)), "the controller's own change stands")
			Expect(taints).To(ContainElement(corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule}))
			n := 0
			for _, t := range taints {
				if t.Key == key() {
					n++
				}
			}
			if puts {
				Expect(taints).To(ContainElement(back()), "the startup taint is in the same write")
				Expect(n).To(Equal(1))
			} else {
				Expect(taints).NotTo(ContainElement(back()))
				Expect(n).To(BeNumerically("<=", 1))
			}
		},
		Entry("lifting unreachable, by the node-controller service account, after a crash", "node-controller",
			func() string { return key() + "=" + oldBoot }, unreachable, nil, true),
		Entry("lifting unreachable, by the controller manager's identity, after a crash", "system:kube-controller-manager",
			func() string { return "example.com/other=boot-0," + key() + "=" + oldBoot }, unreachable, nil, true),
		Entry("lifting not-ready after a crash", "node-controller", func() string { return key() + "=" + oldBoot },
			corev1.TaintNodeNotReady, func(n *corev1.Node) {
				for i := range n.Spec.Taints {
					n.Spec.Taints[i].Key = strings.Replace(n.Spec.Taints[i].Key, "unreachable", "not-ready", 1)
				}
			}, true),
		Entry("in the boot the agent recorded: nothing", "node-controller", func() string { return key() + "=" + newBoot }, unreachable, nil, false),
		Entry("on a Node without a boot record: nothing", "node-controller", func() string { return "" }, unreachable, nil, false),
		Entry("where the record names only another install's key: nothing", "node-controller",
			func() string { return "example.com/other=" + oldBoot }, unreachable, nil, false),
		Entry("where the record is beyond the bounds the policies read: nothing", "node-controller",
			func() string { return strings.Repeat(",", startuptaint.MaxBootRecordEntries) + key() + "=" + oldBoot }, unreachable, nil, false),
		Entry("where the Node carries the key already, with another effect: nothing more", "node-controller",
			func() string { return key() + "=" + oldBoot }, unreachable, func(n *corev1.Node) {
				n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key(), Effect: corev1.TaintEffectNoExecute})
			}, false),
	)

	It("never judges an admin's write, nor the controller's that lifts nothing", func(ctx SpecContext) {
		node := down(ctx, key()+"="+oldBoot, newBoot)
		Expect(lift(ctx, k8sClient, node, unreachable)).NotTo(ContainElement(back()), "an admin lifts the taint")
		node = down(ctx, key()+"="+oldBoot, newBoot)
		Expect(patchNode(ctx, controller("node-controller"), node, func(n *corev1.Node) {
			n.Labels = map[string]string{"example.com/seen": "yes"}
		})).To(Succeed())
		got := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
		Expect(got.Spec.Taints).NotTo(ContainElement(back()), "a write of the controller's that lifts nothing")
	})

	It("lets the agent take the taint off once its gates pass, recording this boot, and an admin remove it by hand", func(ctx SpecContext) {
		node := down(ctx, key()+"="+oldBoot, newBoot)
		Expect(lift(ctx, controller("node-controller"), node, unreachable)).To(ContainElement(back()))
		Expect(patchNode(ctx, asAgentOn(a, node), node, func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t == back() })
			n.Annotations[startuptaint.BootAnnotation] = key() + "=" + newBoot
		})).To(Succeed(), "the agent's own removal, as after any reboot")
		By("another outage in the boot the agent recorded: nothing")
		Expect(patchNode(ctx, controller("node-controller"), node, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: unreachable, Effect: corev1.TaintEffectNoSchedule})
		})).To(Succeed())
		Expect(lift(ctx, controller("node-controller"), node, unreachable)).NotTo(ContainElement(back()))

		By("an admin removes it by hand before the agent's gates pass: the removal stands until another outage in that boot")
		node = down(ctx, key()+"="+oldBoot, newBoot, func(n *corev1.Node) {
			n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool {
				return t.Key == unreachable && t.Effect == corev1.TaintEffectNoExecute
			})
		})
		Expect(lift(ctx, controller("node-controller"), node, unreachable)).To(ContainElement(back()))
		Expect(lift(ctx, k8sClient, node, key())).NotTo(ContainElement(back()))
		Expect(patchNode(ctx, controller("node-controller"), node, func(n *corev1.Node) {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: unreachable, Effect: corev1.TaintEffectNoSchedule})
		})).To(Succeed())
		Expect(lift(ctx, controller("node-controller"), node, unreachable)).To(ContainElement(back()),
			"another outage in that boot puts it back, as the agent would: the record still names the boot before")
	})

	// An admin narrows the agent's DaemonSet after the agent recorded a boot on a Node: no agent
	// runs there any more to take the taint off, so the policy adds none (issue 57, finding 2).
	It("adds nothing on a Node the agent's DaemonSet no longer selects", func(ctx SpecContext) {
		ds := &appsv1.DaemonSet{}
		for _, obj := range objs {
			if obj.GetKind() == "DaemonSet" {
				Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), ds)).To(Succeed())
			}
		}
		Expect(ds.Name).NotTo(BeEmpty(), "the release runs the agent in a DaemonSet")
		narrow := func(ctx context.Context, edit func(*corev1.PodSpec)) {
			GinkgoHelper()
			Eventually(func(g Gomega) {
				g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(ds), ds)).To(Succeed())
				edit(&ds.Spec.Template.Spec)
				g.Expect(k8sClient.Update(ctx, ds)).To(Succeed())
			}).Should(Succeed())
		}
		DeferCleanup(func(ctx SpecContext) { narrow(ctx, func(s *corev1.PodSpec) { s.NodeSelector, s.Affinity = nil, nil }) })
		pool := func(name string) func(*corev1.Node) {
			return func(n *corev1.Node) { n.Labels = map[string]string{"example.com/pool": name} }
		}
		// after is the Node's taints after the controller lifts unreachable on a Node in pool.
		after := func(pool func(*corev1.Node)) []corev1.Taint {
			return lift(ctx, controller("node-controller"), down(ctx, key()+"="+oldBoot, newBoot, pool), unreachable)
		}

		By("a node selector the Node's labels no longer match")
		narrow(ctx, func(s *corev1.PodSpec) { s.NodeSelector = map[string]string{"example.com/pool": "storage"} })
		// The API server reads the DaemonSet from an informer, shortly after it changes.
		Eventually(func() []corev1.Taint { return after(pool("batch")) }).ShouldNot(ContainElement(back()))
		Expect(after(nil)).NotTo(ContainElement(back()), "a Node without the label")
		Expect(after(pool("storage"))).To(ContainElement(back()), "a Node the DaemonSet still selects")

		By("a required node affinity the Node no longer matches")
		narrow(ctx, func(s *corev1.PodSpec) {
			s.NodeSelector = nil
			s.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "example.com/pool", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"batch"}}}},
				}}}}
		})
		Eventually(func() []corev1.Taint { return after(nil) }).Should(ContainElement(back()), "NotIn matches a Node without the label")
		Expect(after(pool("batch"))).NotTo(ContainElement(back()))
		Expect(after(pool("storage"))).To(ContainElement(back()))
	})

	// A render whose groups share their first key, which the agent refuses to start with and the
	// chart refuses to write: the policy adds nothing, where it added the key twice and made the
	// controller's write invalid, so that unreachable was never lifted (issue 57, F11).
	It("adds nothing where two groups share their first key, and the controller's write stands", func(ctx SpecContext) {
		const shared = "example.com/shared"
		uninstall, err := workload.InstallCrashPolicy(ctx, k8sClient, shared+":NoExecute")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(uninstall(ctx)).To(Succeed()) })
		// liftShared lifts unreachable as the controller does, and returns the taints of key shared after.
		liftShared := func(g Gomega) []corev1.Taint {
			node := down(ctx, shared+"="+oldBoot, newBoot)
			g.Expect(patchNode(ctx, controller("node-controller"), node, func(n *corev1.Node) {
				n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == unreachable })
			})).To(Succeed(), "the controller's write")
			got := &corev1.Node{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
			return slices.DeleteFunc(got.Spec.Taints, func(t corev1.Taint) bool { return t.Key != shared })
		}
		Eventually(liftShared).Should(HaveLen(1), "one group: the key goes back")

		policy := &admissionv1.MutatingAdmissionPolicy{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: "taint-after-crash"}, policy)).To(Succeed())
		for i, v := range policy.Spec.Variables {
			policy.Spec.Variables[i].Expression = strings.ReplaceAll(v.Expression, "'"+shared+":NoExecute'",
				"'"+shared+":NoExecute;"+shared+":NoSchedule'")
		}
		Expect(k8sClient.Update(ctx, policy)).To(Succeed())
		Eventually(liftShared).Should(BeEmpty(), "two groups of one key: nothing, and the write admitted")
	})

	// A half-done uninstall that deleted the agent's DaemonSet first: no agent would take the taint
	// off, and the binding's paramRef finds nothing (parameterNotFoundAction Allow): nothing added,
	// and the controller's write stands.
	It("adds nothing once the agent's DaemonSet is gone, and the controller's write stands", func(ctx SpecContext) {
		for _, obj := range objs {
			if obj.GetKind() == "DaemonSet" {
				Expect(deleteObject(ctx, obj)).To(Succeed())
			}
		}
		Eventually(func(g Gomega) []corev1.Taint {
			node := down(ctx, key()+"="+oldBoot, newBoot)
			g.Expect(patchNode(ctx, controller("node-controller"), node, func(n *corev1.Node) {
				n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == unreachable })
			})).To(Succeed(), "the controller's write")
			got := &corev1.Node{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, got)).To(Succeed())
			return got.Spec.Taints
		}).ShouldNot(ContainElement(back()))
	})

	It("leaves the Nodes alone once the install is gone", func(ctx SpecContext) {
		for _, obj := range objs {
			if strings.HasPrefix(obj.GetKind(), "MutatingAdmissionPolicy") {
				Expect(deleteObject(ctx, obj)).To(Succeed())
			}
		}
		Eventually(func(g Gomega) {
			node := down(ctx, key()+"="+oldBoot, newBoot)
			g.Expect(lift(ctx, controller("node-controller"), node, unreachable)).NotTo(ContainElement(back()))
		}).Should(Succeed())
	})
})

// Both policies that read the boot record read it within the bounds the agent keeps to
// (startuptaint.MaxBootRecordLength and MaxBootRecordEntries): a bound changed on one side only
// would let the agent write a record the policy refuses, or trust one it ignores.
var _ = Describe("the boot record's bounds", Label(testkit.RenderOnly), func() {
	It("are the agent's in every policy that reads the record", func() {
		for _, file := range []string{"../../config/policy/policy.yaml", "../../config/components/taint-after-crash/policy.yaml"} {
			data, err := os.ReadFile(file)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(data)).To(And(
				ContainSubstring(fmt.Sprintf("<= %d", startuptaint.MaxBootRecordLength)),
				ContainSubstring(fmt.Sprintf(".split(',')) <= %d", startuptaint.MaxBootRecordEntries))), file)
			// Every size bound on the record is one of the two.
			for _, m := range regexp.MustCompile(`size\(variables\.\w*[rR]ecord[^)]*\)\)? <= (\d+)`).FindAllStringSubmatch(string(data), -1) {
				Expect(m[1]).To(BeElementOf(fmt.Sprint(startuptaint.MaxBootRecordLength), fmt.Sprint(startuptaint.MaxBootRecordEntries)), "%s: %s", file, m[0])
			}
		}
	})
})
