// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// registrationInstalls put the startup taints on at registration
// (config/components/taint-at-registration): the sample, an overlay that renames everything, and
// the chart.
var registrationInstalls = []install{
	{name: "the EBS recipe with its taint put on at registration", dir: "../../config/samples/ebs-taint-at-registration"},
	{name: "a user overlay with its own namespace and name prefix", dir: "testdata/registration-overlay"},
	{name: "the Helm chart with taintAtRegistration", dir: chartDir,
		chart: &chartRelease{name: "reg", namespace: "reg", values: []string{"testdata/registration-values.yaml"}}},
}

// registrationBinding is the one MutatingAdmissionPolicyBinding of objs, or nil.
func registrationBinding(objs []*unstructured.Unstructured) *admissionv1.MutatingAdmissionPolicyBinding {
	GinkgoHelper()
	// The crash policy's binding selects every Node: its policy adds only where the agent recorded a
	// boot. The toleration policies' touch pods and DaemonSets, never a Node.
	bindings := slices.DeleteFunc(only[admissionv1.MutatingAdmissionPolicyBinding](objs, "MutatingAdmissionPolicyBinding"),
		func(b *admissionv1.MutatingAdmissionPolicyBinding) bool {
			return strings.HasSuffix(b.Name, "taint-after-crash") || strings.Contains(b.Name, "tolerate-startup-taints")
		})
	Expect(len(bindings)).To(BeNumerically("<=", 1))
	if len(bindings) == 0 {
		return nil
	}
	return bindings[0]
}

// selectedLabels are the fewest labels a Node carries that the binding's selector selects.
func selectedLabels(b *admissionv1.MutatingAdmissionPolicyBinding) (map[string]string, error) {
	if b.Spec.MatchResources == nil || b.Spec.MatchResources.ObjectSelector == nil {
		return nil, errors.New("the binding selects no Nodes by label: it would taint every Node")
	}
	sel := b.Spec.MatchResources.ObjectSelector
	out := map[string]string{}
	for k, v := range sel.MatchLabels {
		out[k] = v
	}
	for _, e := range sel.MatchExpressions {
		switch e.Operator {
		case metav1.LabelSelectorOpIn:
			out[e.Key] = e.Values[0]
		case metav1.LabelSelectorOpExists:
			out[e.Key] = "x"
		}
	}
	if len(out) == 0 {
		return nil, errors.New("the binding's selector requires no label: it would taint every Node")
	}
	return out, nil
}

// registrationAgrees checks that every Node the install's policy taints at registration is one
// its agent runs on: the DaemonSet's nodeSelector holds for a Node the binding selects, nothing
// narrows it further, and its tolerations cover the taints. A Node that gets the taint and no
// agent keeps it until someone removes it.
func registrationAgrees(objs []*unstructured.Unstructured) error {
	GinkgoHelper()
	b := registrationBinding(objs)
	if b == nil {
		return nil
	}
	nodeLabels, err := selectedLabels(b)
	if err != nil {
		return err
	}
	a := agentOf(objs)
	for _, ds := range only[appsv1.DaemonSet](objs, "DaemonSet") {
		if ds.Namespace != a.namespace || ds.Spec.Template.Spec.ServiceAccountName != a.serviceAccount {
			continue
		}
		pod := ds.Spec.Template.Spec
		if !labels.SelectorFromSet(pod.NodeSelector).Matches(labels.Set(nodeLabels)) {
			return fmt.Errorf("DaemonSet %s: its nodeSelector %v does not hold for a Node the binding selects (%v)", ds.Name, pod.NodeSelector, nodeLabels)
		}
		if pod.Affinity != nil && pod.Affinity.NodeAffinity != nil && pod.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
			return fmt.Errorf("DaemonSet %s: a required node affinity may exclude Nodes the binding selects", ds.Name)
		}
		for _, spec := range a.taints {
			taint := startupTaint(spec)
			tolerated := false
			for _, t := range pod.Tolerations {
				tolerated = tolerated || t.ToleratesTaint(GinkgoLogr, &taint, false)
			}
			if !tolerated {
				return fmt.Errorf("DaemonSet %s tolerates no %s", ds.Name, taint.ToString())
			}
		}
		return nil
	}
	return errors.New("no DaemonSet runs the agent")
}

var _ = Describe("taint at registration's selector and the DaemonSet", Label(testkit.RenderOnly), func() {
	It("agree in every install and sample: each Node the policy taints runs the agent", func() {
		checked := 0
		for _, in := range allInstalls() {
			objs := in.render()
			Expect(registrationAgrees(objs)).To(Succeed(), in.name)
			if registrationBinding(objs) != nil {
				checked++
			}
		}
		Expect(checked).To(BeNumerically(">=", len(registrationInstalls)))

		By("a DaemonSet narrower than the selector, or intolerant of the taint, fails the check")
		objs := render("../../config/samples/ebs-taint-at-registration")
		for _, o := range objs {
			if o.GetKind() == "DaemonSet" {
				Expect(unstructured.SetNestedStringMap(o.Object, map[string]string{"eks.amazonaws.com/nodegroup": "other"},
					"spec", "template", "spec", "nodeSelector")).To(Succeed())
			}
		}
		Expect(registrationAgrees(objs)).To(MatchError(ContainSubstring("does not hold for a Node the binding selects")))
		objs = render("../../config/samples/ebs-taint-at-registration")
		for _, o := range objs {
			if o.GetKind() == "DaemonSet" {
				unstructured.RemoveNestedField(o.Object, "spec", "template", "spec", "tolerations")
			}
		}
		Expect(registrationAgrees(objs)).To(MatchError(ContainSubstring("tolerates no ebs.csi.aws.com/agent-not-ready")))
	})

	It("are kept in agreement by the chart, which refuses a policy without a selector or wider than its DaemonSet", func() {
		for sets, msg := range map[string]string{
			"taintAtRegistration.enabled=true": "taintAtRegistration.nodeSelector: set the labels of the node pools that run the agent",
			"taintAtRegistration.enabled=true,taintAtRegistration.nodeSelector.pool=a,nodeSelector.pool=b": "must require nodeSelector's pool=b",
		} {
			_, err := (&chartRelease{name: "reg", namespace: "reg", sets: []string{sets}}).tryRender(chartDir)
			Expect(err).To(MatchError(ContainSubstring(msg)), sets)
		}
	})
})

var _ = Describe("taint at registration", func() {
	if !testkit.ServesMinor(startuptaint.TaintAtRegistrationMinor) {
		// Nothing to judge on this minor: apply shows the API server refuses the policy's kind.
		return
	}
	It("fails loudly where a renderer leaves the placeholder: the API server refuses the policy", func(ctx SpecContext) {
		data, err := os.ReadFile("../../config/components/taint-at-registration/policy.yaml")
		Expect(err).NotTo(HaveOccurred())
		objs, err := objects.Decode(data)
		Expect(err).NotTo(HaveOccurred())
		policies := only[admissionv1.MutatingAdmissionPolicy](objs, "MutatingAdmissionPolicy")
		Expect(policies).To(HaveLen(1))
		err = k8sClient.Create(ctx, policies[0], client.DryRunAll)
		Expect(err).To(MatchError(ContainSubstring("compilation failed")))
		Expect(err).To(MatchError(ContainSubstring(`\\TAINTS`)))
	})

	samePolicy := policyRenderLabels(registrationInstalls)
	for i, in := range registrationInstalls {
		Context(in.name, Ordered, samePolicy[i], func() {
			var (
				objs []*unstructured.Unstructured
				a    agent
				pool map[string]string
				seq  int
			)
			prefix := fmt.Sprintf("registration%d", i)
			nodeName := func() string {
				seq++
				return fmt.Sprintf("%s-node-%d", prefix, seq)
			}
			startup := func() []corev1.Taint {
				out := make([]corev1.Taint, 0, len(a.taints))
				for _, spec := range a.taints {
					out = append(out, startupTaint(spec))
				}
				return out
			}
			// register creates a Node as its kubelet, with labels, and returns it as created.
			register := func(ctx context.Context, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
				GinkgoHelper()
				name := nodeName()
				node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}, Spec: corev1.NodeSpec{Taints: taints}}
				Expect(kubelet(ctx, name).Create(ctx, node)).To(Succeed(), "kubelet registers its Node")
				DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
				return node
			}

			BeforeAll(func(ctx SpecContext) {
				objs = in.render()
				a = agentOf(objs)
				var err error
				pool, err = selectedLabels(registrationBinding(objs))
				Expect(err).NotTo(HaveOccurred())
				apply(ctx, objs)
				DeferCleanup(func(ctx SpecContext) {
					for _, obj := range objs {
						Expect(deleteObject(ctx, obj)).To(Succeed())
					}
				})
				// The API server picks a new policy up shortly after it is created.
				Eventually(func(g Gomega) {
					node := register(ctx, pool)
					g.Expect(node.Spec.Taints).To(ContainElements(startup()))
				}).Should(Succeed())
			})

			It("puts the taints in the first version of a Node that kubelet registers, and the agent removes them", func(ctx SpecContext) {
				name := nodeName()
				first := firstVersion(ctx, name, hollowkubelet.Options{Kubeconfig: kubeletKubeconfig(ctx, name), Node: name, Labels: pool})
				Expect(first.Spec.Taints).To(ContainElements(startup()))
				AddReportEntry("first version of a registered Node", fmt.Sprintf("%s: labels %v, taints %v", name, first.Labels, first.Spec.Taints))

				startAgent(a.config(name), name, a.taints, nil)
				Eventually(func(g Gomega) {
					node := &corev1.Node{}
					g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
					g.Expect(startuptaint.MatchingTaints(node.Spec.Taints, a.taints)).To(BeEmpty())
				}).Should(Succeed(), "the agent removes them")
			})

			It("gives a Node its selector does not match no taint", func(ctx SpecContext) {
				name := nodeName()
				first := firstVersion(ctx, name, hollowkubelet.Options{Kubeconfig: kubeletKubeconfig(ctx, name), Node: name,
					Labels: map[string]string{"example.com/pool": "other"}})
				Expect(startuptaint.MatchingTaints(first.Spec.Taints, a.taints)).To(BeEmpty())
			})

			It("gives a Node that kubelet registers again no taint", func(ctx SpecContext) {
				name := nodeName()
				o := hollowkubelet.Options{Kubeconfig: kubeletKubeconfig(ctx, name), Node: name, Labels: pool, Log: GinkgoWriter}
				Expect(firstVersion(ctx, name, o).Spec.Taints).To(ContainElements(startup()))
				// kubelet may still be writing the Node it registered: retried on conflicts, as the agent is.
				Expect(testkit.UpdateNode(ctx, k8sClient, name, func(n *corev1.Node) {
					n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, a.taints)
				})).To(Succeed(), "the taints are removed, as the agent does")

				By("kubelet restarts, and registers the Node again")
				restarted := time.Now()
				k, err := hollowkubelet.Start(o)
				Expect(err).NotTo(HaveOccurred())
				DeferCleanup(k.Stop)
				Eventually(func(g Gomega) {
					node := &corev1.Node{}
					g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
					g.Expect(node.Status.Conditions).To(ContainElement(And(HaveField("Type", corev1.NodeReady),
						HaveField("LastHeartbeatTime.Time", BeTemporally(">", restarted.Truncate(time.Second))))), "the new kubelet posts its status")
					g.Expect(startuptaint.MatchingTaints(node.Spec.Taints, a.taints)).To(BeEmpty())
				}, time.Minute).Should(Succeed())
			})

			It("leaves a Node that registers with the key as it is", func(ctx SpecContext) {
				own := corev1.Taint{Key: a.taints[0].Key, Value: "pool", Effect: corev1.TaintEffectNoSchedule}
				node := register(ctx, pool, own)
				Expect(node.Spec.Taints).To(ContainElement(own))
				Expect(node.Spec.Taints).NotTo(ContainElement(startupTaint(a.taints[0])))
			})

			It("never keeps a Node from registering, and adds nothing, when it cannot work", func(ctx SpecContext) {
				mutated := suffixed[admissionv1.MutatingAdmissionPolicy](objs, "MutatingAdmissionPolicy", "taint-at-registration")
				type breakage struct {
					what, outcome string
					breakIt       func(*admissionv1.MutatingAdmissionPolicy)
				}
				taintList := func(list string) func(*admissionv1.MutatingAdmissionPolicy) {
					return func(p *admissionv1.MutatingAdmissionPolicy) {
						for i, v := range p.Spec.Variables {
							if v.Name == "taintList" {
								p.Spec.Variables[i].Expression = "'" + list + "'"
							}
						}
					}
				}
				// Keys a looser check let through, which the API server refuses with the whole Node.
				refused := []string{"example.com/" + strings.Repeat("n", 64), "bad..prefix.example.com/agent-not-ready",
					strings.Repeat("p", 254) + "/agent-not-ready", "Example.com/agent-not-ready"}
				broken := make([]breakage, 0, 3+len(refused))
				for _, key := range refused {
					broken = append(broken, breakage{"the taint " + key + ", which Kubernetes refuses", "no_error", taintList(key)})
				}
				broken = append(broken, []breakage{
					{"taints the agent would refuse", "no_error", taintList("Not A Taint!")},
					{"a patch that does not apply", "invalid_error", func(p *admissionv1.MutatingAdmissionPolicy) {
						p.Spec.Mutations[0].JSONPatch.Expression =
							`[JSONPatch{op: "add", path: "/spec/taints/99", value: Object.spec.taints{key: "example.com/x", effect: "NoSchedule"}}]`
					}},
					{"an expression that fails", "invalid_error", func(p *admissionv1.MutatingAdmissionPolicy) {
						p.Spec.Mutations[0].JSONPatch.Expression =
							`[JSONPatch{op: "add", path: "/spec/taints/-", value: Object.spec.taints{key: object.metadata.labels["missing"], effect: "NoSchedule"}}]`
					}},
				}...)
				for n, b := range broken {
					label := map[string]string{"example.com/broken": fmt.Sprint(n)}
					p := mutated.DeepCopy()
					p.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("%s-broken-%d", prefix, n)}
					b.breakIt(p)
					binding := &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: p.Name},
						Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: p.Name,
							MatchResources: &admissionv1.MatchResources{ObjectSelector: &metav1.LabelSelector{MatchLabels: label}}}}
					Expect(k8sClient.Create(ctx, p)).To(Succeed(), b.what)
					Expect(k8sClient.Create(ctx, binding)).To(Succeed(), b.what)
					DeferCleanup(func(ctx SpecContext) {
						Expect(k8sClient.Delete(ctx, binding)).To(Succeed())
						Expect(k8sClient.Delete(ctx, p)).To(Succeed())
					})
					// Every Node registers, untainted; the API server's count of the policy's
					// outcomes shows when it was in force.
					Eventually(func(g Gomega) float64 {
						node := register(ctx, label)
						// The API server's TaintNodesByCondition admission adds not-ready to every new Node.
						g.Expect(node.Spec.Taints).To(ConsistOf(HaveField("Key", corev1.TaintNodeNotReady)), b.what)
						return policyChecks(ctx, p.Name, b.outcome)
					}).Should(BeNumerically(">", 0), "%s: evaluated, with outcome %s", b.what, b.outcome)
					AddReportEntry("taint at registration that cannot work", fmt.Sprintf("%s: the Node registers untainted (%s)", b.what, b.outcome))
				}
			})

			It("never keeps a Node from registering with any one of its objects deleted", func(ctx SpecContext) {
				for _, obj := range objs {
					if !strings.HasPrefix(obj.GetKind(), "MutatingAdmissionPolicy") || !strings.HasSuffix(obj.GetName(), "taint-at-registration") {
						continue
					}
					Expect(k8sClient.Delete(ctx, obj.DeepCopy())).To(Succeed())
					By("a Node registers with " + obj.GetKind() + " " + obj.GetName() + " deleted")
					Eventually(func(g Gomega) {
						g.Expect(startuptaint.MatchingTaints(register(ctx, pool).Spec.Taints, a.taints)).To(BeEmpty())
					}).Should(Succeed(), "once the API server sees the deletion, nothing is added")
					nodeWritesWork(ctx, nodeName())
					Expect(k8sClient.Create(ctx, obj.DeepCopy())).To(Succeed())
					Eventually(func(g Gomega) {
						g.Expect(register(ctx, pool).Spec.Taints).To(ContainElements(startup()))
					}).Should(Succeed(), "re-created, it taints again")
				}
			})

			It("uninstalls step by step without ever keeping a Node from registering, and then kubelets register normally", func(ctx SpecContext) {
				uninstall(ctx, objs, prefix+"-uninstall", func(ctx context.Context) { register(ctx, pool) })
				Eventually(func(g Gomega) {
					g.Expect(startuptaint.MatchingTaints(register(ctx, pool).Spec.Taints, a.taints)).To(BeEmpty())
				}).Should(Succeed())
				name := nodeName()
				first := firstVersion(ctx, name, hollowkubelet.Options{Kubeconfig: kubeletKubeconfig(ctx, name), Node: name, Labels: pool})
				Expect(startuptaint.MatchingTaints(first.Spec.Taints, a.taints)).To(BeEmpty())
			})
		})
	}
})

// firstVersion runs a hollow kubelet that registers name until the spec ends, and returns the
// first version of its Node that anyone could read, from a watch opened before kubelet starts.
func firstVersion(ctx context.Context, name string, o hollowkubelet.Options) *corev1.Node {
	GinkgoHelper()
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.Scheme})
	Expect(err).NotTo(HaveOccurred())
	w, err := wc.Watch(ctx, &corev1.NodeList{}, client.MatchingFields{"metadata.name": name})
	Expect(err).NotTo(HaveOccurred())
	defer w.Stop()
	if o.Log == nil {
		o.Log = GinkgoWriter
	}
	k, err := hollowkubelet.Start(o)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(k.Stop)
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}))).To(Succeed())
	})
	select {
	case e := <-w.ResultChan():
		Expect(e.Type).To(Equal(watch.Added))
		node, ok := e.Object.(*corev1.Node)
		Expect(ok).To(BeTrue())
		return node
	case <-time.After(time.Minute):
		Fail("kubelet registered no Node within a minute")
	}
	return nil
}

// policyChecks is the API server's count of a MutatingAdmissionPolicy's evaluations with the
// outcome errorType (no_error, invalid_error, ...).
func policyChecks(ctx context.Context, policy, errorType string) float64 {
	GinkgoHelper()
	data, err := kubernetes.NewForConfigOrDie(cfg).Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "apiserver_mutating_admission_policy_check_total{") &&
			strings.Contains(line, `policy="`+policy+`"`) && strings.Contains(line, `error_type="`+errorType+`"`) {
			var v float64
			_, err := fmt.Sscan(line[strings.LastIndex(line, " ")+1:], &v)
			Expect(err).NotTo(HaveOccurred(), line)
			total += v
		}
	}
	return total
}
