// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/internal/metrics"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// installs are every way the README installs the agent: kustomize configurations and the Helm
// chart with values files. Each must confine exactly the identity its DaemonSet runs as, let that
// identity remove its own startup taints, and come and go without ever blocking anyone else's
// Node writes.
var installs = []install{
	{name: "config/default", dir: "../../config/default"},
	{name: "a user overlay with its own namespace, name prefix, suffix and labels", dir: "testdata/overlay"},
	{name: "the EBS sidecar recipe", dir: "../../config/samples/ebs-sidecar"},
	{name: "the EFS sidecar recipe", dir: "../../config/samples/efs-sidecar"},
	{name: "the Azure Disk sidecar recipe", dir: "../../config/samples/azuredisk-sidecar"},
	{name: "the EBS sidecar with continuous mode and a Node condition", dir: "testdata/continuous-sidecar"},
	{name: "the EBS and EFS recipe: one agent, a group per driver", dir: "../../config/samples/ebs-efs"},
	{name: "the Cilium recipe: a watched ready file, no CSI socket", dir: "../../config/samples/cilium"},
	{name: "the EBS recipe with its taint put on at registration", dir: "../../config/samples/ebs-taint-at-registration"},
	{name: "the Karpenter recipe: a readiness.k8s.io/ taint and condition", dir: "../../config/samples/karpenter-readiness"},
	{name: "the Cluster Autoscaler recipe: a startup-taint.cluster-autoscaler.kubernetes.io/ taint",
		dir: "../../config/samples/autoscaler-startup-taint"},
	{name: "the Cilium recipe gated on the Cilium agent's pod", dir: "../../config/samples/cilium-pod",
		podReads: "kube-system/startup-taint-remover-cilium-pod-startup-taint-remover-pods"},
	{name: "the every-node-agent recipe: --node-agents alone", dir: "../../config/samples/node-agents",
		agentReads: "startup-taint-remover-node-agents-node-agents"},
	{name: "the Helm chart with its default values", dir: chartDir, chart: &chartRelease{name: "default", namespace: "charted"}},
	{name: "the Helm chart for every node agent, no configuration", dir: chartDir, agentReads: "agents-startup-taint-remover-node-agents",
		chart: &chartRelease{name: "agents", namespace: "agents", values: []string{chartDir + "/ci/node-agents-values.yaml"}}},
	{name: "the Helm chart for EBS with continuous mode and a Node condition", dir: chartDir, chart: &chartRelease{
		name: "ebs", namespace: "ebs-csi", values: []string{chartDir + "/ci/ebs-values.yaml", "testdata/continuous-values.yaml"}}},
	{name: "the Helm chart for EBS and EFS on one node, with continuous mode and a condition per group", dir: chartDir, chart: &chartRelease{
		name: "storage", namespace: "storage", values: []string{chartDir + "/ci/ebs-efs-values.yaml"}}},
}

// install is one way to install the agent: a kustomization directory, or a chart directory
// rendered as a release.
type install struct {
	name, dir string
	chart     *chartRelease
	// podReads is the one Role, NAMESPACE/NAME, that lets the agent read pods (--require-pod).
	podReads string
	// agentReads is the one ClusterRole that lets the agent list DaemonSets and pods
	// (--node-agents).
	agentReads string
}

func (in install) render() []*unstructured.Unstructured {
	GinkgoHelper()
	if in.chart != nil {
		return in.chart.render(in.dir)
	}
	return render(in.dir)
}

// agent is what a rendered install says about the pods it runs.
type agent struct {
	namespace, serviceAccount string
	user                      string
	groups                    []string
	// taintList is the rendered --taint value, with a semicolon between groups when the agent
	// serves several (--config); taints is its parsed form, every group's, and groupTaints each
	// group's.
	taintList   string
	taints      []startuptaint.TaintSpec
	groupTaints [][]startuptaint.TaintSpec
	// retaintAfter and conditionType are the rendered --retaint-after and --condition-type (each
	// group's, comma-separated), empty when off.
	retaintAfter, conditionType string
}

// ownCondition is a condition type the agent writes: its first, or one when it writes none.
func (a agent) ownCondition() string {
	if a.conditionType == "" {
		return "example.com/AgentReady"
	}
	return strings.Split(a.conditionType, ",")[0]
}

// removedSpecs are the entries of RemovedAnnotation once every startup taint has been removed,
// in no particular order.
func (a agent) removedSpecs() []string {
	specs := make([]string, 0, len(a.taints))
	for _, spec := range a.taints {
		specs = append(specs, spec.String())
	}
	return specs
}

// retaints are the taints continuous mode may put back: each group's first key, NoSchedule.
func (a agent) retaints() []string {
	out := make([]string, 0, len(a.groupTaints))
	for _, g := range a.groupTaints {
		out = append(out, g[0].Key+":NoSchedule")
	}
	return out
}

// agentOf reads the agent from the one DaemonSet that runs the startup-taint-remover container.
func agentOf(objs []*unstructured.Unstructured) agent {
	GinkgoHelper()
	var found []agent
	for _, ds := range only[appsv1.DaemonSet](objs, "DaemonSet") {
		for _, c := range ds.Spec.Template.Spec.Containers {
			if c.Name != "startup-taint-remover" {
				continue
			}
			config := slices.ContainsFunc(c.Args, func(arg string) bool { return strings.HasPrefix(arg, "--config=") })
			if config {
				Expect(c.Args).To(ContainElement("--retaint-after=$(RETAINT_AFTER)"))
			} else {
				Expect(c.Args).To(ContainElements("--taint=$(STARTUP_TAINTS)", "--retaint-after=$(RETAINT_AFTER)", "--condition-type=$(CONDITION_TYPE)"))
			}
			a := agent{namespace: ds.Namespace, serviceAccount: ds.Spec.Template.Spec.ServiceAccountName}
			for _, env := range c.Env {
				switch env.Name {
				case "STARTUP_TAINTS":
					a.taintList = env.Value
				case "RETAINT_AFTER":
					a.retaintAfter = env.Value
				case "CONDITION_TYPE":
					a.conditionType = env.Value
				}
			}
			Expect(a.taintList).NotTo(BeEmpty(), "STARTUP_TAINTS has a rendered value")
			for _, list := range strings.Split(a.taintList, ";") {
				var group []startuptaint.TaintSpec
				for _, item := range strings.Split(list, ",") {
					spec, err := startuptaint.ParseTaintSpec(strings.TrimSpace(item))
					Expect(err).NotTo(HaveOccurred())
					group = append(group, spec)
				}
				a.taints, a.groupTaints = append(a.taints, group...), append(a.groupTaints, group)
			}
			if config {
				Expect(configuredGroups(objs)).To(Equal(a.groupTaints), "the groups file lists each group's taints as the policy does")
			} else {
				Expect(a.groupTaints).To(HaveLen(1), "without --config, one group")
			}
			a.user, a.groups = serviceAccount(a.namespace, a.serviceAccount)
			found = append(found, a)
		}
	}
	Expect(found).To(HaveLen(1), "one DaemonSet runs the startup-taint-remover container")
	return found[0]
}

// configuredGroups reads each group's taints from the groups file (--config) of the install: the
// data of its one ConfigMap, which the DaemonSet mounts.
func configuredGroups(objs []*unstructured.Unstructured) [][]startuptaint.TaintSpec {
	GinkgoHelper()
	maps := only[corev1.ConfigMap](objs, "ConfigMap")
	Expect(maps).To(HaveLen(1))
	var file struct {
		Groups []struct {
			Taint any `json:"taint"`
		} `json:"groups"`
	}
	Expect(yaml.Unmarshal([]byte(maps[0].Data["groups.yaml"]), &file)).To(Succeed())
	out := make([][]startuptaint.TaintSpec, 0, len(file.Groups))
	for _, g := range file.Groups {
		var items []any
		switch t := g.Taint.(type) {
		case string:
			items = []any{t}
		case []any:
			items = t
		}
		var group []startuptaint.TaintSpec
		for _, item := range items {
			for _, s := range strings.Split(fmt.Sprint(item), ",") {
				spec, err := startuptaint.ParseTaintSpec(strings.TrimSpace(s))
				Expect(err).NotTo(HaveOccurred())
				group = append(group, spec)
			}
		}
		out = append(out, group)
	}
	return out
}

// startupTaint is the taint a node registers with for spec.
func startupTaint(spec startuptaint.TaintSpec) corev1.Taint {
	effect := spec.Effect
	if effect == "" {
		effect = corev1.TaintEffectNoExecute
	}
	return corev1.Taint{Key: spec.Key, Effect: effect}
}

// servedSince is the first minor of Kubernetes 1.x that serves each kind an install renders, where
// that is later than the oldest supported minor.
var servedSince = map[string]int{"MutatingAdmissionPolicy": startuptaint.TaintAtRegistrationMinor, "MutatingAdmissionPolicyBinding": startuptaint.TaintAtRegistrationMinor}

// served reports whether the API server serves obj's kind.
func served(obj *unstructured.Unstructured) bool {
	return testkit.ServesMinor(servedSince[obj.GetKind()])
}

// deleteObject deletes a rendered object, as `kubectl delete` does: one that is not there, or
// whose kind the API server does not serve, is left out.
func deleteObject(ctx context.Context, obj *unstructured.Unstructured) error {
	if !served(obj) {
		return nil
	}
	return client.IgnoreNotFound(k8sClient.Delete(ctx, obj.DeepCopy()))
}

// apply creates the rendered objects, as `kubectl apply` of a fresh install does. On a minor that
// does not serve a kind yet, the API server refuses its objects, and kubectl applies the others.
func apply(ctx context.Context, objs []*unstructured.Unstructured) {
	GinkgoHelper()
	for _, obj := range objs {
		err := k8sClient.Create(ctx, obj.DeepCopy())
		if !served(obj) {
			Expect(err).To(HaveOccurred(), "a %s on a minor that does not serve it", obj.GetKind())
			continue
		}
		Expect(err).To(Succeed(), "create %s %s", obj.GetKind(), obj.GetName())
	}
}

// uninstall deletes the rendered objects in their order, as `make undeploy` (kubectl delete -f)
// does, and checks after every step that Node writes still work, and whatever else checks test. A deleted Namespace takes its
// objects with it: envtest runs no namespace controller, so this does its work, one object at a time.
func uninstall(ctx context.Context, objs []*unstructured.Unstructured, checkName string, checks ...func(context.Context)) {
	GinkgoHelper()
	step := 0
	check := func(what string) {
		step++
		By("Node writes still work after " + what)
		nodeWritesWork(ctx, fmt.Sprintf("%s-%d", checkName, step))
		for _, c := range checks {
			c(ctx)
		}
	}
	deleted := map[string]bool{}
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	for _, obj := range objs {
		if deleted[key(obj)] {
			continue
		}
		Expect(deleteObject(ctx, obj)).To(Succeed())
		deleted[key(obj)] = true
		check("deleting " + key(obj))
		if obj.GetKind() != "Namespace" {
			continue
		}
		for _, inNS := range objs {
			if inNS.GetNamespace() == obj.GetName() && !deleted[key(inNS)] && isNamespaced(inNS) {
				Expect(deleteObject(ctx, inNS)).To(Succeed())
				deleted[key(inNS)] = true
				check("the namespace controller deleting " + key(inNS))
			}
		}
		finalizeNamespace(ctx, obj.GetName())
		check("the namespace is gone")
	}
}

// finalizeNamespace ends a deleted Namespace as the namespace controller, which envtest does not
// run, would once its objects are gone, so that the name can be used again.
func finalizeNamespace(ctx context.Context, name string) {
	GinkgoHelper()
	ns := &corev1.Namespace{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, ns)).To(Succeed())
	ns.Spec.Finalizers = nil
	Expect(k8sClient.SubResource("finalize").Update(ctx, ns)).To(Succeed())
}

func isNamespaced(obj *unstructured.Unstructured) bool {
	switch obj.GetKind() {
	case "Namespace", "ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
		"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding":
		return false
	}
	return true
}

// startAgent runs the real controller, configured as the binary is, with c's identity, and returns
// a channel that receives what the manager's Start returned; the spec's cleanup stops it.
func startAgent(c *rest.Config, node string, taints []startuptaint.TaintSpec, confinement *controllers.ConfinementCheck,
	configure ...func(*controllers.NodeReconciler)) <-chan error {
	GinkgoHelper()
	r := &controllers.NodeReconciler{NodeName: node,
		Groups:        []controllers.Group{{Taints: taints, Gates: []gates.Gate{testkit.AlwaysReady{}}}},
		ProbeInterval: 100 * time.Millisecond, Confinement: confinement}
	for _, f := range configure {
		f(r)
	}
	return testkit.StartManager(c, r.ManagerOptions(), r.SetupWithManager)
}

// agentConfig is a REST config that acts as a's pod on node.
func (a agent) config(node string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: a.user, Groups: a.groups,
		Extra: testkit.PodTokenExtra(context.Background(), k8sClient, node)}
	return c
}

// tagged is how a refusal by the shipped policies' rule tag ends (controllers.RefusalTag reads
// it); the tests assert the tag, never the prose.
func tagged(tag string) string { return "[" + tag + "]" }

// The refusals the table expects: the shipped policies' tags, and RBAC's words.
var (
	msgOtherNode     = tagged(startuptaint.RefusalOwnNode)
	msgTaintsOnly    = tagged(startuptaint.RefusalTaints)
	msgMetadata      = tagged(startuptaint.RefusalMetadata)
	msgSpec          = tagged(startuptaint.RefusalSpec)
	msgBound         = tagged(startuptaint.RefusalManagedBound)
	msgEntries       = tagged(startuptaint.RefusalManagedEntries)
	msgGained        = tagged(startuptaint.RefusalManagedGained)
	msgLost          = tagged(startuptaint.RefusalManagedLost)
	msgNoNodeClaim   = tagged(startuptaint.RefusalNodeClaim)
	msgEvents        = tagged(startuptaint.RefusalEventRegarding)
	msgEventReporter = tagged(startuptaint.RefusalEventReporter)
	msgEventMetadata = tagged(startuptaint.RefusalEventMetadata)
	msgEventUpdate   = tagged(startuptaint.RefusalEventUpdate)
	msgRemovedRecord = tagged(startuptaint.RefusalRemovedRecord)
	msgBootRecord    = tagged(startuptaint.RefusalBootRecord)
	msgCondition     = tagged(startuptaint.RefusalCondition)
)

const msgRBAC = "cannot"

// msgStatus is the policy's refusal of a status write that is not the agent's own condition.
func (a agent) msgStatus() string {
	if a.conditionType == "" {
		return tagged(startuptaint.RefusalStatusOff)
	}
	return tagged(startuptaint.RefusalStatus)
}

var _ = Describe("every README install", Label(testkit.RenderOnly), func() {
	It("is in the test table, and no sample is left out", func() {
		samples, err := filepath.Glob("../../config/samples/*")
		Expect(err).NotTo(HaveOccurred())
		Expect(samples).NotTo(BeEmpty())
		dirs := make([]string, 0, len(installs))
		for _, in := range allInstalls() {
			dirs = append(dirs, in.dir)
		}
		Expect(dirs).To(ContainElement(chartDir), "the Helm chart")
		readme, err := os.ReadFile("../../README.md")
		Expect(err).NotTo(HaveOccurred())
		for _, s := range samples {
			Expect(dirs).To(ContainElement(s))
			Expect(string(readme)).To(ContainSubstring(strings.TrimPrefix(s, "../../")), "the README shows the recipe %s", s)
		}
	})
})

// installTable labels the install table, which make test runs in a process of its own beside the
// rest of the suite.
const installTable = "install-table"

var _ = Describe("the rendered installs", Label(installTable), func() {
	samePolicy := policyRenderLabels(installs)
	for i, in := range installs {
		// The chart refuses to install below the oldest supported minor (chart_test.go); every
		// other install applies there whole, and its policy judges the agent's token as anywhere.
		if in.chart != nil && !testkit.ServesMinor(startuptaint.MinKubernetesMinor) {
			continue
		}
		Context(in.name, Ordered, samePolicy[i], func() {
			var (
				objs  []*unstructured.Unstructured
				a     agent
				other = corev1.Taint{Key: "example.com/other", Value: "x", Effect: corev1.TaintEffectNoSchedule}
				seq   int
			)
			prefix := fmt.Sprintf("install%d", i)
			newNode := func(ctx context.Context, extra ...corev1.Taint) string {
				seq++
				name := fmt.Sprintf("%s-node-%d", prefix, seq)
				taints := make([]corev1.Taint, 0, len(a.taints)+1+len(extra))
				for _, spec := range a.taints {
					taints = append(taints, startupTaint(spec))
				}
				node := &corev1.Node{
					ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "a"}, Annotations: map[string]string{"note": "n"}},
					Spec:       corev1.NodeSpec{Taints: append(append(taints, other), extra...)},
				}
				Expect(k8sClient.Create(ctx, node)).To(Succeed())
				DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
				return name
			}
			removeStartup := func(n *corev1.Node) { n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, a.taints) }
			asAgent := func(node string) client.Client { return asAgentOn(a, node) }

			BeforeAll(func(ctx SpecContext) {
				objs = in.render()
				a = agentOf(objs)
				apply(ctx, objs)
				// The last spec uninstalls step by step; this removes whatever a failure left behind.
				DeferCleanup(func(ctx SpecContext) {
					for _, obj := range objs {
						Expect(deleteObject(ctx, obj)).To(Succeed())
					}
				})
				// The API server picks a new policy up shortly after it is created; until then RBAC
				// alone rules. (Its type-checking status is written by kube-controller-manager, which
				// envtest does not run: the specific messages below show that each expression evaluates.)
				probe := newNode(ctx)
				refusedOnceLoaded(ctx, asAgent("elsewhere"), probe, removeStartup, ContainSubstring(msgOtherNode))
			})

			It("confines exactly the identity its DaemonSet runs as, with no parameter object", Label(testkit.RenderOnly), func() {
				for _, cm := range only[corev1.ConfigMap](objs, "ConfigMap") {
					Expect(cm.Data).To(HaveKey("groups.yaml"), "the taints are written in at render time; no ConfigMap but the groups file is applied")
				}
				for _, obj := range objs {
					data, err := yaml.Marshal(obj.Object)
					Expect(err).NotTo(HaveOccurred())
					Expect(placeholder.Match(data)).To(BeFalse(), "a placeholder left in %s %s", obj.GetKind(), obj.GetName())
				}
				policies := only[admissionv1.ValidatingAdmissionPolicy](objs, "ValidatingAdmissionPolicy")
				Expect(policies).To(HaveLen(2))
				for _, p := range policies {
					Expect(p.Spec.ParamKind).To(BeNil())
					Expect(p.Spec.MatchConditions).To(ContainElement(HaveField("Expression", ContainSubstring("['"+a.taintList+"']"))))
				}
				for name, value := range map[string]string{"taintList": a.taintList, "retaintAfter": a.retaintAfter, "conditionType": a.conditionType} {
					Expect(policies).To(ContainElement(HaveField("Spec.Variables", ContainElement(And(
						HaveField("Name", name), HaveField("Expression", "'"+value+"'"))))), "the policy's %s is the DaemonSet's", name)
				}
				bindings := only[admissionv1.ValidatingAdmissionPolicyBinding](objs, "ValidatingAdmissionPolicyBinding")
				Expect(bindings).To(HaveLen(2))
				for _, b := range bindings {
					Expect(b.Spec.ParamRef).To(BeNil())
				}

				// The grant the policies know the agent by names exactly its taints, and is bound to
				// exactly the DaemonSet's service account; so is every other role of the install.
				marked := 0
				for _, role := range only[rbacv1.ClusterRole](objs, "ClusterRole") {
					for _, rule := range role.Rules {
						if slices.Contains(rule.Resources, "startuptaints") {
							Expect(rule.ResourceNames).To(Equal([]string{a.taintList}))
							marked++
						}
					}
				}
				Expect(marked).To(Equal(1))
				me := rbacv1.Subject{Kind: "ServiceAccount", Name: a.serviceAccount, Namespace: a.namespace}
				for _, b := range only[rbacv1.ClusterRoleBinding](objs, "ClusterRoleBinding") {
					Expect(b.Subjects).To(Equal([]rbacv1.Subject{me}), b.Name)
				}
				// No namespaced grant but the pod reads of --require-pod, bound to the agent as well:
				// otherwise pod reads come only with config/sidecar/ready-container.
				for _, b := range only[rbacv1.RoleBinding](objs, "RoleBinding") {
					Expect(b.Subjects).To(Equal([]rbacv1.Subject{me}), b.Name)
					if b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == in.agentReads {
						continue // the node agents' read, in each of their namespaces (pod reads, below)
					}
					Expect(in.podReads).To(Equal(b.Namespace+"/"+b.Name), "the install's one pod reader")
				}
				for _, role := range only[rbacv1.Role](objs, "Role") {
					Expect(in.podReads).To(Equal(role.Namespace+"/"+role.Name), "the install's one pod reader")
				}
			})

			if in.agentReads != "" {
				// What the token reads, asked of the API server: DaemonSets and pods in the node agents'
				// namespaces only (kube-system and its own unless named), never cluster-wide or in a
				// tenant's namespace, with the environment values written into those pods' specs.
				It("lets the agent list DaemonSets and pods in the node agents' namespaces only, and neither watch DaemonSets nor read a Secret", func(ctx SpecContext) {
					agentClient := asAgent(newNode(ctx))
					namespaces := nodeAgentNamespaces(in.render(), a)
					fromCache := &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}
					for _, ns := range namespaces {
						Eventually(func() error { return agentClient.List(ctx, &appsv1.DaemonSetList{}, client.InNamespace(ns), fromCache) }).Should(Succeed(), ns)
						Expect(agentClient.List(ctx, &corev1.PodList{}, client.InNamespace(ns), client.MatchingFields{"spec.nodeName": "n1"})).To(Succeed(), ns)
					}
					for what, list := range map[string]func() error{
						"DaemonSets cluster-wide": func() error { return agentClient.List(ctx, &appsv1.DaemonSetList{}, fromCache) },
						"pods cluster-wide": func() error {
							return agentClient.List(ctx, &corev1.PodList{}, client.MatchingFields{"spec.nodeName": "n1"})
						},
						"DaemonSets of a tenant": func() error {
							return agentClient.List(ctx, &appsv1.DaemonSetList{}, client.InNamespace("tenant"), fromCache)
						},
						"pods of a tenant": func() error { return agentClient.List(ctx, &corev1.PodList{}, client.InNamespace("tenant")) },
						"a DaemonSet by name": func() error {
							return agentClient.Get(ctx, client.ObjectKey{Namespace: namespaces[0], Name: "x"}, &appsv1.DaemonSet{})
						},
						"Secrets of a node agents' namespace": func() error { return agentClient.List(ctx, &corev1.SecretList{}, client.InNamespace(namespaces[0])) },
					} {
						err := list()
						Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: %v", what, err)
					}
				})
			}

			It("lets the real controller, with only the agent's identity, remove its own startup taints, and it finds itself confined", func(ctx SpecContext) {
				name := newNode(ctx)
				metrics.Default().Confined.Set(0)
				confinement := controllers.NewConfinementCheck(true)
				done := startAgent(a.config(name), name, a.taints, confinement)
				Eventually(func(g Gomega) {
					node := &corev1.Node{}
					g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
					g.Expect(startuptaint.MatchingTaints(node.Spec.Taints, a.taints)).To(BeEmpty())
					g.Expect(node.Spec.Taints).To(ContainElement(other))
					g.Expect(node.Labels).To(Equal(map[string]string{"zone": "a"}))
					g.Expect(node.Annotations).To(HaveLen(2))
					g.Expect(node.Annotations).To(HaveKeyWithValue("note", "n"))
					g.Expect(strings.Split(node.Annotations[startuptaint.RemovedAnnotation], ",")).To(ConsistOf(a.removedSpecs()))
				}).Should(Succeed())
				Eventually(func() float64 { return testutil.ToFloat64(metrics.Default().Confined) }).Should(Equal(1.0))
				Eventually(func(g Gomega) {
					list := &eventsv1.EventList{}
					g.Expect(k8sClient.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
					g.Expect(list.Items).To(ContainElement(And(
						HaveField("Reason", startuptaint.EventReasonTaintRemoved), HaveField("Regarding.Name", name))))
				}).Should(Succeed(), "the policy lets it record events about its own Node")
				Consistently(done, "500ms").ShouldNot(Receive(), "a confined agent keeps running with --require-confinement")
			})

			It("reports the dry-run confinement check as confined, writing nothing", func(ctx SpecContext) {
				name := newNode(ctx)
				check := &controllers.ConfinementCheck{Client: asAgent(name), NodeName: name}
				outcome, _, err := check.Check(ctx)
				Expect(err).NotTo(HaveOccurred())
				Expect(outcome).To(Equal(controllers.Confined))
				node := &corev1.Node{}
				Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
				Expect(node.Labels).NotTo(HaveKey(startuptaint.ConfinementProbeLabel))
			})

			// Each forbidden request is made on a node of its own whose name the token claims.
			type request struct {
				name string
				do   func(ctx context.Context, c client.Client, own string) error
				// denial is a part of the expected message: the policy's own words where RBAC allows
				// the request, RBAC's where it does not.
				denial string
			}
			requests := []request{
				{"patching another node's taints", func(ctx context.Context, c client.Client, _ string) error {
					return patchNode(ctx, c, newNode(ctx), removeStartup)
				}, msgOtherNode},
				{"labelling another node", func(ctx context.Context, c client.Client, _ string) error {
					return patchNode(ctx, c, newNode(ctx), func(n *corev1.Node) { n.Labels["zone"] = "b" })
				}, msgOtherNode},
				{"removing another taint", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, []startuptaint.TaintSpec{{Key: other.Key}})
					})
				}, msgTaintsOnly},
				{"adding a taint", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/new", Effect: corev1.TaintEffectNoSchedule})
					})
				}, msgTaintsOnly},
				{"re-adding its own startup taint", func(ctx context.Context, c client.Client, own string) error {
					if err := patchNode(ctx, k8sClient, own, removeStartup); err != nil {
						return err
					}
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, startupTaint(a.taints[0])) })
				}, msgTaintsOnly},
				{"changing a taint's effect", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.Taints[0].Effect = corev1.TaintEffectPreferNoSchedule })
				}, msgTaintsOnly},
				{"changing a taint's value", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.Taints[len(n.Spec.Taints)-1].Value = "changed" })
				}, msgTaintsOnly},
				{"changing a label", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { removeStartup(n); n.Labels["zone"] = "b" })
				}, msgMetadata},
				{"changing an annotation", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { removeStartup(n); n.Annotations["extra"] = "x" })
				}, msgMetadata},
				{"recording another taint as removed once", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						n.Annotations[startuptaint.RemovedAnnotation] = a.taints[0].String() + "," + other.Key
					})
				}, msgRemovedRecord},
				{"reordering the taints", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { slices.Reverse(n.Spec.Taints) })
				}, msgTaintsOnly},
				{"removing its startup taint and moving another", func(ctx context.Context, c client.Client, own string) error {
					if err := patchNode(ctx, k8sClient, own, func(n *corev1.Node) {
						n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/second", Effect: corev1.TaintEffectNoSchedule})
					}); err != nil {
						return err
					}
					return patchNode(ctx, c, own, func(n *corev1.Node) { removeStartup(n); slices.Reverse(n.Spec.Taints) })
				}, msgTaintsOnly},
				{"recording its own startup taint as removed without removing it", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.Annotations[startuptaint.RemovedAnnotation] = a.taints[0].String() })
				}, msgRemovedRecord},
				{"recording its own startup taint twice", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						n.Annotations[startuptaint.RemovedAnnotation] = strings.Repeat(a.taints[0].String()+",", 2000) + a.taints[0].String()
					})
				}, msgRemovedRecord},
				{"recording again a taint the record lists", func(ctx context.Context, c client.Client, own string) error {
					if err := patchNode(ctx, k8sClient, own, func(n *corev1.Node) {
						n.Annotations[startuptaint.RemovedAnnotation] = strings.Join(a.removedSpecs(), ",")
					}); err != nil {
						return err
					}
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						n.Annotations[startuptaint.RemovedAnnotation] += "," + a.taints[0].String()
					})
				}, msgRemovedRecord},
				{"rewriting the record of removed taints", func(ctx context.Context, c client.Client, own string) error {
					if err := patchNode(ctx, k8sClient, own, func(n *corev1.Node) {
						n.Annotations[startuptaint.RemovedAnnotation] = "example.com/a,example.com/b"
					}); err != nil {
						return err
					}
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						n.Annotations[startuptaint.RemovedAnnotation] = "example.com/b,example.com/a," + strings.Join(a.removedSpecs(), ",")
					})
				}, msgRemovedRecord},
				{"erasing the record of removed taints", func(ctx context.Context, c client.Client, own string) error {
					if err := patchNode(ctx, k8sClient, own, func(n *corev1.Node) {
						n.Annotations[startuptaint.RemovedAnnotation] = a.taints[0].String()
					}); err != nil {
						return err
					}
					return patchNode(ctx, c, own, func(n *corev1.Node) { delete(n.Annotations, startuptaint.RemovedAnnotation) })
				}, msgMetadata},
				{"setting metadata.generateName", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.GenerateName = "forged-" })
				}, msgMetadata},
				{"adding a finalizer", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.Finalizers = append(n.Finalizers, "example.com/hold") })
				}, msgMetadata},
				{"handing a server-side apply manager ownership of a label (managedFields)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						n.ManagedFields = append(n.ManagedFields,
							managedEntry("applier", metav1.ManagedFieldsOperationApply, "", `{"f:metadata":{"f:labels":{"f:zone":{}}}}`))
					})
				}, msgEntries},
				{"forging another manager's Update entry (managedFields), which locks others' applies", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						n.ManagedFields = append(n.ManagedFields, managedEntry("kube-controller-manager", metav1.ManagedFieldsOperationUpdate, "",
							`{"f:metadata":{"f:labels":{"f:applied":{}}},"f:spec":{"f:unschedulable":{}}}`))
					})
				}, msgEntries},
				{"forging an Apply entry of its own manager that owns the taints without a change (managedFields)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						n.ManagedFields = append(n.ManagedFields, managedEntry(startuptaint.FieldManager, metav1.ManagedFieldsOperationApply, "", `{"f:spec":{"f:taints":{}}}`))
					})
				}, msgEntries},
				{"adding 2,000 entries of its own manager (managedFields), 780 KB of Node", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						for i := range 2000 {
							n.ManagedFields = append(n.ManagedFields,
								managedEntry(startuptaint.FieldManager, metav1.ManagedFieldsOperationUpdate, fmt.Sprintf("s%d", i), `{"f:spec":{"f:taints":{}}}`))
						}
					})
				}, msgEntries},
				// The API server folds Update entries beyond 10 into one; Apply entries it keeps, one
				// per manager. One short of the bound leaves room for an entry it may add for the writer.
				{"adding server-side apply entries (managedFields) up to the most the policy reads", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { addAppliers(n, startuptaint.MaxManagedFieldsEntries-1) })
				}, msgEntries},
				{"adding server-side apply entries (managedFields) past the most the policy reads", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { addAppliers(n, startuptaint.MaxManagedFieldsEntries+1) })
				}, msgBound},
				{"rewriting another manager's time (managedFields)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						for i := range n.ManagedFields {
							if n.ManagedFields[i].Manager != startuptaint.FieldManager {
								n.ManagedFields[i].Time = &metav1.Time{Time: time.Unix(0, 0)}
							}
						}
					})
				}, msgEntries},
				{"adding fields to an existing manager's entry (managedFields)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						for i := range n.ManagedFields {
							n.ManagedFields[i].FieldsV1 = metav1.NewFieldsV1(strings.Replace(n.ManagedFields[i].FieldsV1.GetRawString(),
								`"f:metadata":{`, `"f:metadata":{"f:finalizers":{},`, 1))
						}
					})
				}, msgGained},
				{"giving its own entry fields it never writes (managedFields)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						n.ManagedFields = append(n.ManagedFields, managedEntry(startuptaint.FieldManager, metav1.ManagedFieldsOperationUpdate, "", `{"f:metadata":{"f:labels":{"f:zone":{}}}}`))
					})
				}, msgGained},
				{"giving its own entry a leaf of the spec (managedFields)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						n.ManagedFields = append(n.ManagedFields, managedEntry(startuptaint.FieldManager, metav1.ManagedFieldsOperationUpdate, "", `{"f:spec":{"f:unschedulable":{}}}`))
					})
				}, msgGained},
				{"removing another manager's ownership of a label (managedFields)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						for i := range n.ManagedFields {
							n.ManagedFields[i].FieldsV1 = metav1.NewFieldsV1(strings.Replace(n.ManagedFields[i].FieldsV1.GetRawString(), `"f:zone":{}`, `"f:zone2":{}`, 1))
						}
					})
				}, msgGained},
				{"taking away another manager's ownership of a label (managedFields)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						removeStartup(n)
						for i := range n.ManagedFields {
							n.ManagedFields[i].FieldsV1 = withoutField(n.ManagedFields[i].FieldsV1, "f:metadata", "f:labels", "f:zone")
						}
					})
				}, msgLost},
				{"cordoning the node", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.Unschedulable = true })
				}, msgSpec},
				{"setting podCIDR", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.PodCIDR = "10.0.0.0/24" })
				}, msgSpec},
				{"setting providerID", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) { n.Spec.ProviderID = "example://x" })
				}, msgSpec},
				{"setting spec.podPreemptionPolicy (a field the policy does not name)", func(ctx context.Context, c client.Client, own string) error {
					return patchNode(ctx, c, own, func(n *corev1.Node) {
						n.Spec.PodPreemptionPolicy = &corev1.NodePodPreemptionPolicy{DisableResizePreemption: []string{"example.com/autoscaler"}}
					})
				}, msgSpec},
				{"deleting the node", func(ctx context.Context, c client.Client, own string) error {
					return c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: own}})
				}, msgRBAC},
				{"creating a node", func(ctx context.Context, c client.Client, own string) error {
					node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: own + "-twin"}}
					err := c.Create(ctx, node)
					if err == nil {
						DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
					}
					return err
				}, msgRBAC},
				{"recording an event about another object", func(ctx context.Context, c client.Client, own string) error {
					return c.Create(ctx, nodeEvent(own, metav1.NamespaceDefault,
						corev1.ObjectReference{Kind: "Pod", Namespace: metav1.NamespaceDefault, Name: "victim"}), client.DryRunAll)
				}, msgEvents},
				{"recording an event about another Node", func(ctx context.Context, c client.Client, own string) error {
					return c.Create(ctx, nodeEvent(own, metav1.NamespaceDefault, nodeRef(own+"-other")), client.DryRunAll)
				}, msgEvents},
				{"recording an event about its Node under another API group and a namespace", func(ctx context.Context, c client.Client, own string) error {
					return c.Create(ctx, nodeEvent(own, metav1.NamespaceDefault, corev1.ObjectReference{APIVersion: "evil.example/v1", Kind: "Node",
						Namespace: "kube-system", Name: own, UID: "bogus"}), client.DryRunAll)
				}, msgEvents},
				{"recording an event about its Node in a namespace", func(ctx context.Context, c client.Client, own string) error {
					ref := nodeRef(own)
					ref.Namespace = "kube-system"
					return c.Create(ctx, nodeEvent(own, metav1.NamespaceDefault, ref), client.DryRunAll)
				}, msgEvents},
				{"recording an event that names a related object", func(ctx context.Context, c client.Client, own string) error {
					event := nodeEvent(own, metav1.NamespaceDefault, nodeRef(own))
					event.Related = &corev1.ObjectReference{APIVersion: "v1", Kind: "Secret", Namespace: "kube-system", Name: "victim"}
					return c.Create(ctx, event, client.DryRunAll)
				}, msgEvents},
				{"recording an event in another namespace", func(ctx context.Context, c client.Client, own string) error {
					return c.Create(ctx, nodeEvent(own, "kube-public", corev1.ObjectReference{Kind: "Pod", Namespace: "kube-public", Name: "victim"}), client.DryRunAll)
				}, msgEvents},
				{"recording an event about its Node that names another Node's UID", func(ctx context.Context, c client.Client, own string) error {
					ref := nodeRef(own)
					ref.UID = "6f1d9c3e-0000-4000-8000-000000000001"
					return c.Create(ctx, nodeEvent(own, metav1.NamespaceDefault, ref), client.DryRunAll)
				}, msgEvents},
				{"recording a NodeNotReady warning as another node's agent", func(ctx context.Context, c client.Client, own string) error {
					event := nodeEvent(own, metav1.NamespaceDefault, nodeRef(own))
					event.ReportingInstance, event.Type, event.Reason = startuptaint.EventSource+"-"+own+"-other", corev1.EventTypeWarning, "NodeNotReady"
					return c.Create(ctx, event, client.DryRunAll)
				}, msgEventReporter},
				{"recording an event with a 250 KiB annotation", func(ctx context.Context, c client.Client, own string) error {
					event := nodeEvent(own, metav1.NamespaceDefault, nodeRef(own))
					event.Annotations = map[string]string{"example.com/blob": strings.Repeat("x", 250<<10)}
					return c.Create(ctx, event, client.DryRunAll)
				}, msgEventMetadata},
				{"recording an event with a finalizer", func(ctx context.Context, c client.Client, own string) error {
					event := nodeEvent(own, metav1.NamespaceDefault, nodeRef(own))
					event.Finalizers = []string{"example.com/hold"}
					return c.Create(ctx, event, client.DryRunAll)
				}, msgEventMetadata},
				{"counting 999999 repeats of another install's event about its Node, and labelling it", func(ctx context.Context, c client.Client, own string) error {
					event := recordedEvent(ctx, own, startuptaint.EventSource+"-another-install-pod")
					return patchEvent(ctx, c, event, func(e *eventsv1.Event) {
						e.Labels = map[string]string{"example.com/owner": "me"}
						e.Series = &eventsv1.EventSeries{Count: 999999, LastObservedTime: metav1.NowMicro()}
					})
				}, msgEventUpdate},
				{"counting 999999 repeats of its own event", func(ctx context.Context, c client.Client, own string) error {
					event := recordedEvent(ctx, own, startuptaint.EventSource+"-"+own)
					return patchEvent(ctx, c, event, func(e *eventsv1.Event) {
						e.Series = &eventsv1.EventSeries{Count: 999999, LastObservedTime: metav1.NowMicro()}
					})
				}, msgEventUpdate},
				{"labelling its own event", func(ctx context.Context, c client.Client, own string) error {
					event := recordedEvent(ctx, own, startuptaint.EventSource+"-"+own)
					return patchEvent(ctx, c, event, func(e *eventsv1.Event) { e.Labels = map[string]string{"example.com/owner": "me"} })
				}, msgEventMetadata},
			}

			// The first minor of Kubernetes 1.x that has the field a request writes: an older API
			// server drops the field, and there is nothing to judge.
			since := map[string]int{"setting spec.podPreemptionPolicy (a field the policy does not name)": podPreemptionMinor}
			for _, req := range requests {
				if !testkit.ServesMinor(since[req.name]) {
					continue
				}
				It("denies the agent "+req.name, Label(testkit.BelowMinimum), func(ctx SpecContext) {
					own := newNode(ctx)
					err := req.do(ctx, asAgent(own), own)
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
					Expect(err.Error()).To(ContainSubstring(req.denial))
				})
				It("lets an admin "+req.name, Label(testkit.BelowMinimum), func(ctx SpecContext) {
					own := newNode(ctx)
					Expect(req.do(ctx, k8sClient, own)).To(Succeed())
				})
			}

			It("names, in each refusal of a metadata, spec or status change, what the request changed", func(ctx SpecContext) {
				for what, tt := range map[string]struct {
					change func(*corev1.Node)
					want   string
				}{
					"deleting every label": {func(n *corev1.Node) { n.Labels = nil }, "(changed: labels) " + msgMetadata},
					"adding an annotation": {func(n *corev1.Node) { removeStartup(n); n.Annotations["extra"] = "x" }, "(changed: annotations extra) " + msgMetadata},
					"deleting an annotation and adding a finalizer": {func(n *corev1.Node) {
						delete(n.Annotations, "note")
						n.Finalizers = []string{"example.com/hold"}
					}, "(changed: finalizers, annotations note) " + msgMetadata},
					"cordoning": {func(n *corev1.Node) { n.Spec.Unschedulable = true }, "(changed: unschedulable) " + msgSpec},
				} {
					own := newNode(ctx)
					err := patchNode(ctx, asAgent(own), own, tt.change)
					Expect(err).To(MatchError(ContainSubstring(tt.want)), what)
				}

				By("removing the last finalizer of a Node being deleted")
				own := newNode(ctx)
				Expect(patchNode(ctx, k8sClient, own, func(n *corev1.Node) { n.Finalizers = []string{"example.com/hold"} })).To(Succeed())
				Expect(k8sClient.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: own}})).To(Succeed())
				DeferCleanup(func(ctx SpecContext) {
					Expect(client.IgnoreNotFound(patchNode(ctx, k8sClient, own, func(n *corev1.Node) { n.Finalizers = nil }))).To(Succeed())
				})
				err := patchNode(ctx, asAgent(own), own, func(n *corev1.Node) { n.Finalizers = nil })
				Expect(err).To(MatchError(ContainSubstring("(changed: finalizers) " + msgMetadata)))
			})

			// Every optional field the policies read, absent or empty as another writer may leave it:
			// the agent's own removal, and its condition, are admitted all the same.
			It("admits the agent's own writes whatever optional field the policy reads is absent or empty", func(ctx SpecContext) {
				entry := func(manager, subresource string, at *metav1.Time) metav1.ManagedFieldsEntry {
					e := managedEntry(manager, metav1.ManagedFieldsOperationUpdate, subresource, `{"f:metadata":{"f:labels":{"f:zone":{}}}}`)
					e.Time = at
					return e
				}
				withEntry := func(e metav1.ManagedFieldsEntry) func(*corev1.Node) {
					return func(n *corev1.Node) { n.ManagedFields = append(n.ManagedFields, e) }
				}
				hasEntry := func(match func(metav1.ManagedFieldsEntry) bool) func(*corev1.Node) bool {
					return func(n *corev1.Node) bool { return slices.ContainsFunc(n.ManagedFields, match) }
				}
				bare := condition(a.ownCondition(), corev1.ConditionTrue)
				bare.Reason, bare.Message, bare.LastHeartbeatTime, bare.LastTransitionTime = "", "", metav1.Time{}, metav1.Time{}
				kubelets := condition(string(corev1.NodeReady), corev1.ConditionTrue)
				kubelets.Reason, kubelets.Message, kubelets.LastHeartbeatTime = "", "", metav1.Time{}
				for what, tt := range map[string]struct {
					meta, status func(*corev1.Node)
					stored       func(*corev1.Node) bool
				}{
					"no annotations": {meta: func(n *corev1.Node) { n.Annotations = nil },
						stored: func(n *corev1.Node) bool { return n.Annotations == nil }},
					"an empty removed record": {meta: func(n *corev1.Node) { n.Annotations[startuptaint.RemovedAnnotation] = "" },
						stored: func(n *corev1.Node) bool {
							v, ok := n.Annotations[startuptaint.RemovedAnnotation]
							return ok && v == ""
						}},
					"no labels": {meta: func(n *corev1.Node) { n.Labels = nil }, stored: func(n *corev1.Node) bool { return n.Labels == nil }},
					"a managedFields entry without a manager": {meta: withEntry(entry("", "", &metav1.Time{Time: time.Now()})),
						stored: hasEntry(func(e metav1.ManagedFieldsEntry) bool { return e.Manager == "" })},
					"a managedFields entry without a time": {meta: withEntry(entry("other", "", nil)),
						stored: hasEntry(func(e metav1.ManagedFieldsEntry) bool { return e.Manager == "other" && e.Time == nil })},
					"a managedFields entry of its own manager without a time": {meta: withEntry(entry(startuptaint.FieldManager, "", nil)),
						stored: hasEntry(func(e metav1.ManagedFieldsEntry) bool { return e.Manager == startuptaint.FieldManager && e.Time == nil })},
					"a managedFields entry of the status subresource without a manager": {meta: withEntry(entry("", "status", nil)),
						stored: hasEntry(func(e metav1.ManagedFieldsEntry) bool { return e.Manager == "" && e.Subresource == "status" })},
					"no managedFields": {meta: func(n *corev1.Node) { n.ManagedFields = []metav1.ManagedFieldsEntry{{}} },
						stored: func(n *corev1.Node) bool { return len(n.ManagedFields) == 0 }},
					"a taint with a time and no value": {meta: func(n *corev1.Node) {
						n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/timed", Effect: corev1.TaintEffectNoExecute, TimeAdded: &metav1.Time{Time: time.Now()}})
					}, stored: func(n *corev1.Node) bool {
						return slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.TimeAdded != nil && t.Value == "" })
					}},
					"a condition of kubelet's without reason, message or heartbeat": {status: func(n *corev1.Node) { n.Status.Conditions = []corev1.NodeCondition{kubelets} },
						stored: func(n *corev1.Node) bool { return len(n.Status.Conditions) == 1 && n.Status.Conditions[0].Reason == "" }},
					"its own condition without reason, message or times": {status: func(n *corev1.Node) { n.Status.Conditions = []corev1.NodeCondition{bare} },
						stored: func(n *corev1.Node) bool {
							return len(n.Status.Conditions) == 1 && n.Status.Conditions[0].LastTransitionTime.IsZero() && n.Status.Conditions[0].Message == ""
						}},
				} {
					own := newNode(ctx)
					if tt.meta != nil {
						Expect(patchNode(ctx, k8sClient, own, tt.meta)).To(Succeed(), what)
					}
					if tt.status != nil {
						Expect(writeStatus(ctx, k8sClient, own, tt.status)).To(Succeed(), what)
					}
					node := &corev1.Node{}
					Expect(k8sClient.Get(ctx, client.ObjectKey{Name: own}, node)).To(Succeed())
					Expect(tt.stored(node)).To(BeTrue(), "the API server stores %s", what)

					Expect(patchNode(ctx, asAgent(own), own, func(n *corev1.Node) {
						removeStartup(n)
						if n.Annotations == nil {
							n.Annotations = map[string]string{}
						}
						n.Annotations[startuptaint.RemovedAnnotation] = strings.Join(a.removedSpecs(), ",")
					})).To(Succeed(), "the agent's removal, with %s", what)
					if a.conditionType != "" {
						Expect(writeStatus(ctx, asAgent(own), own, func(n *corev1.Node) {
							n.Status.Conditions = append(slices.DeleteFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool {
								return string(c.Type) == a.ownCondition()
							}), condition(a.ownCondition(), corev1.ConditionFalse))
						})).To(Succeed(), "the agent's condition, with %s", what)
					}
				}
			})

			It("honours the effect of a startup taint configured as KEY:EFFECT", func(ctx SpecContext) {
				for _, spec := range a.taints {
					if spec.Effect == "" {
						continue
					}
					wrong := corev1.Taint{Key: spec.Key, Effect: corev1.TaintEffectPreferNoSchedule}
					own := newNode(ctx, wrong)
					err := patchNode(ctx, asAgent(own), own, func(n *corev1.Node) {
						n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, []startuptaint.TaintSpec{{Key: spec.Key}})
					})
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
					Expect(err.Error()).To(ContainSubstring(msgTaintsOnly))
					Expect(patchNode(ctx, asAgent(own), own, removeStartup)).To(Succeed(), "the configured effect goes")
				}
			})

			It("lets the agent put back exactly its continuous-mode taint, and only when the install turns continuous mode on", func(ctx SpecContext) {
				back := corev1.Taint{Key: a.taints[0].Key, Effect: corev1.TaintEffectNoSchedule}
				add := func(t corev1.Taint) func(*corev1.Node) {
					return func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, t) }
				}
				own := newNode(ctx)
				Expect(patchNode(ctx, asAgent(own), own, removeStartup)).To(Succeed())
				if a.retaintAfter == "" {
					err := patchNode(ctx, asAgent(own), own, add(back))
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
					Expect(err.Error()).To(And(ContainSubstring(msgTaintsOnly), ContainSubstring("("+a.taintList+")"),
						ContainSubstring("back only after a reboot, while the Node is cordoned or while it shuts down")))
					return
				}
				msg := And(ContainSubstring(msgTaintsOnly), ContainSubstring("("+a.taintList+") and put "+strings.Join(a.retaints(), ", ")+" back"))
				for what, t := range map[string]corev1.Taint{
					"another effect": {Key: back.Key, Effect: corev1.TaintEffectPreferNoSchedule},
					"NoExecute":      {Key: back.Key, Effect: corev1.TaintEffectNoExecute},
					"another key":    {Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule},
					"a value":        {Key: back.Key, Value: "x", Effect: corev1.TaintEffectNoSchedule},
				} {
					err := patchNode(ctx, asAgent(own), own, add(t))
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want a denial, got %v", what, err)
					Expect(err.Error()).To(msg, what)
				}
				err := patchNode(ctx, asAgent(own), newNode(ctx), func(n *corev1.Node) { removeStartup(n); add(back)(n) })
				Expect(err).To(MatchError(ContainSubstring(msgOtherNode)), "on another node")

				// Each group's own: its first key.
				var removed []string
				for _, g := range a.groupTaints {
					back := corev1.Taint{Key: g[0].Key, Effect: corev1.TaintEffectNoSchedule}
					Expect(patchNode(ctx, asAgent(own), own, add(back))).To(Succeed(), "puts %s back", back.ToString())
					removed = append(removed, back.ToString())
					Expect(patchNode(ctx, asAgent(own), own, func(n *corev1.Node) {
						n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, []startuptaint.TaintSpec{{Key: back.Key, Effect: back.Effect}})
						n.Annotations[startuptaint.RemovedAnnotation] = strings.Join(removed, ",")
					})).To(Succeed(), "and takes %s off again, recording it", back.ToString())
				}
			})

			// A boot ID with a "," or "=" splits the record's entries: an agent that recorded it would be
			// refused every removal; it leaves the record alone instead (startuptaint.BootID).
			It("admits the agent's removal on a Node whose boot ID the boot record cannot hold, which the agent leaves unrecorded", func(ctx SpecContext) {
				own := newNode(ctx)
				const odd = "boot=2,x"
				Expect(writeStatus(ctx, kubelet(ctx, own), own, func(n *corev1.Node) { n.Status.NodeInfo.BootID = odd })).To(Succeed())
				Expect(patchNode(ctx, asAgent(own), own, func(n *corev1.Node) {
					removeStartup(n)
					n.Annotations[startuptaint.BootAnnotation] = a.taints[0].Key + "=" + odd
				})).To(MatchError(ContainSubstring(msgBootRecord)), "a removal that records that boot")
				Expect(patchNode(ctx, asAgent(own), own, removeStartup)).To(Succeed(), "the removal that leaves the record alone")
			})

			// `kubectl annotate node N startup-taint-remover.github.io/boot=`, where `boot-` was meant,
			// leaves an empty record: the agent and the policy both read it as no entries, so the real
			// controller's removal, which records the boot, is admitted (it was refused [boot-record]
			// while the agent read one empty entry and kept it).
			It("lets the real controller remove its taints and record the boot on a Node whose boot record is empty", func(ctx SpecContext) {
				own := newNode(ctx)
				Expect(writeStatus(ctx, kubelet(ctx, own), own, func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-1" })).To(Succeed())
				Expect(patchNode(ctx, k8sClient, own, func(n *corev1.Node) { n.Annotations[startuptaint.BootAnnotation] = "" })).To(Succeed())
				startAgent(a.config(own), own, a.taints, nil)
				Eventually(func(g Gomega) {
					node := &corev1.Node{}
					g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: own}, node)).To(Succeed())
					g.Expect(startuptaint.MatchingTaints(node.Spec.Taints, a.taints)).To(BeEmpty())
					g.Expect(strings.Split(node.Annotations[startuptaint.BootAnnotation], ",")).To(
						And(ContainElement(a.taints[0].Key+"=boot-1"), Not(ContainElement(""))))
				}).Should(Succeed())
			})

			It("lets the agent put its taint back after a reboot and while kubelet shuts the Node down, keeping its boot record its own", func(ctx SpecContext) {
				own := newNode(ctx)
				// kubelet reports its boot, as its status setter does; the agent removes its taints
				// and records the boot for each of its keys; another install's entry stays as it is.
				boot := func(id string) func(*corev1.Node) { return func(n *corev1.Node) { n.Status.NodeInfo.BootID = id } }
				record := func(id string) string {
					var entries []string
					for _, spec := range a.taints {
						if e := spec.Key + "=" + id; !slices.Contains(entries, e) {
							entries = append(entries, e)
						}
					}
					return "example.com/other=boot-0," + strings.Join(entries, ",")
				}
				Expect(writeStatus(ctx, kubelet(ctx, own), own, boot("boot-1"))).To(Succeed())
				Expect(patchNode(ctx, k8sClient, own, func(n *corev1.Node) { n.Annotations[startuptaint.BootAnnotation] = "example.com/other=boot-0" })).To(Succeed())
				Expect(patchNode(ctx, asAgent(own), own, func(n *corev1.Node) {
					removeStartup(n)
					n.Annotations[startuptaint.BootAnnotation] = record("boot-1")
				})).To(Succeed(), "the removal records the boot")
				for what, value := range map[string]string{
					"another boot ID in its entry":   record("forged"),
					"another install's entry":        strings.Replace(record("boot-1"), "boot-0", "boot-1", 1),
					"its entry removed":              "example.com/other=boot-0",
					"another install's entry erased": strings.TrimPrefix(record("boot-1"), "example.com/other=boot-0,"),
				} {
					err := patchNode(ctx, asAgent(own), own, func(n *corev1.Node) { n.Annotations[startuptaint.BootAnnotation] = value })
					Expect(err).To(MatchError(ContainSubstring(msgBootRecord)), what)
				}
				backs := make([]corev1.Taint, 0, len(a.groupTaints))
				for _, g := range a.groupTaints {
					backs = append(backs, corev1.Taint{Key: g[0].Key, Effect: corev1.TaintEffectNoSchedule})
				}
				putBack := func(n *corev1.Node) { n.Spec.Taints = append(n.Spec.Taints, backs...) }
				takeOff := func(id string) func(*corev1.Node) {
					return func(n *corev1.Node) {
						for _, b := range backs {
							n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, []startuptaint.TaintSpec{{Key: b.Key, Effect: b.Effect}})
						}
						n.Annotations[startuptaint.RemovedAnnotation] = strings.Join(a.retaints(), ",")
						n.Annotations[startuptaint.BootAnnotation] = record(id)
					}
				}
				if a.retaintAfter == "" {
					Expect(patchNode(ctx, asAgent(own), own, putBack)).To(MatchError(ContainSubstring(msgTaintsOnly)), "in the same boot")
					Expect(writeStatus(ctx, kubelet(ctx, own), own, func(n *corev1.Node) {
						n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
							Message: "container runtime is down"}}
					})).To(Succeed())
					Expect(patchNode(ctx, asAgent(own), own, putBack)).To(MatchError(ContainSubstring(msgTaintsOnly)), "not ready for another reason")
				}

				By("a reboot: kubelet reports another boot")
				Expect(writeStatus(ctx, kubelet(ctx, own), own, boot("boot-2"))).To(Succeed())
				Expect(patchNode(ctx, asAgent(own), own, putBack)).To(Succeed(), "the taints go back after the reboot")
				Expect(patchNode(ctx, asAgent(own), own, takeOff("boot-2"))).To(Succeed(), "and come off, recording this boot")
				if a.retaintAfter == "" {
					Expect(patchNode(ctx, asAgent(own), own, putBack)).To(MatchError(ContainSubstring(msgTaintsOnly)), "once this boot is recorded")
				}

				By("a cordon, as a drain before a reboot makes")
				Expect(patchNode(ctx, k8sClient, own, func(n *corev1.Node) { n.Spec.Unschedulable = true })).To(Succeed())
				Expect(patchNode(ctx, asAgent(own), own, putBack)).To(Succeed(), "the taints go back on a cordoned node")
				Expect(patchNode(ctx, k8sClient, own, func(n *corev1.Node) { n.Spec.Unschedulable = false })).To(Succeed())
				Expect(patchNode(ctx, asAgent(own), own, takeOff("boot-2"))).To(Succeed(), "and come off once it is uncordoned")

				By("a graceful shutdown: kubelet's Ready condition says so")
				Expect(writeStatus(ctx, kubelet(ctx, own), own, func(n *corev1.Node) {
					n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
						Message: "[container runtime is down, " + startuptaint.NodeShuttingDownMessage + "]"}}
				})).To(Succeed())
				Expect(patchNode(ctx, asAgent(own), own, putBack)).To(Succeed(), "the taints go back as the node shuts down")
				err := patchNode(ctx, asAgent(own), own, func(n *corev1.Node) {
					n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/new", Effect: corev1.TaintEffectNoSchedule})
				})
				Expect(err).To(MatchError(ContainSubstring(msgTaintsOnly)), "no other taint, even then")
			})

			It("lets the agent write exactly its own Node condition, and only when the install names one", func(ctx SpecContext) {
				own := newNode(ctx)
				kubelets := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
					LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
				kubeletConditions := []corev1.NodeCondition{kubelets, condition(string(corev1.NodeMemoryPressure), corev1.ConditionFalse),
					condition(string(corev1.NodeDiskPressure), corev1.ConditionFalse), condition(string(corev1.NodeNetworkUnavailable), corev1.ConditionFalse)}
				Expect(writeStatus(ctx, kubelet(ctx, own), own, func(n *corev1.Node) { n.Status.Conditions = kubeletConditions })).
					To(Succeed())
				ours := a.ownCondition()
				withOurs := func(change func(*corev1.NodeCondition)) func(*corev1.Node) {
					return func(n *corev1.Node) {
						c := condition(ours, corev1.ConditionTrue)
						change(&c)
						n.Status.Conditions = append(n.Status.Conditions, c)
					}
				}
				statusRefusal, conditionRefusal := a.msgStatus(), msgCondition
				if a.conditionType == "" {
					conditionRefusal = statusRefusal // no condition of its own, so no write of one gets that far
				}
				refused := map[string]struct {
					change func(*corev1.Node)
					tag    string
				}{
					"another condition type": {func(n *corev1.Node) {
						n.Status.Conditions = append(n.Status.Conditions, condition("example.com/Other", corev1.ConditionTrue))
					}, statusRefusal},
					"kubelet's condition": {func(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }, statusRefusal},
					"removing kubelet's condition": {func(n *corev1.Node) {
						n.Status.Conditions = []corev1.NodeCondition{condition(ours, corev1.ConditionTrue)}
					}, statusRefusal},
					// The node lifecycle controller drops network-unavailable once NetworkUnavailable is gone.
					"kubelet's NetworkUnavailable and DiskPressure, each replaced by a copy of MemoryPressure": {func(n *corev1.Node) {
						n.Status.Conditions = []corev1.NodeCondition{n.Status.Conditions[0], n.Status.Conditions[1], n.Status.Conditions[1], n.Status.Conditions[1]}
					}, statusRefusal},
					"kubelet's conditions, reordered": {func(n *corev1.Node) { slices.Reverse(n.Status.Conditions) }, statusRefusal},
					"its condition twice": {func(n *corev1.Node) {
						n.Status.Conditions = append(n.Status.Conditions, condition(ours, corev1.ConditionTrue), condition(ours, corev1.ConditionFalse))
					}, statusRefusal},
					"another status field": {func(n *corev1.Node) {
						n.Status.Capacity = corev1.ResourceList{"example.com/gpu": resource.MustParse("1")}
					}, statusRefusal},
					"its condition and another status field": {func(n *corev1.Node) {
						n.Status.Conditions = append(n.Status.Conditions, condition(ours, corev1.ConditionTrue))
						n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.9"}}
					}, statusRefusal},
					"its condition with a message of 1025 characters": {withOurs(func(c *corev1.NodeCondition) { c.Message = strings.Repeat("m", 1025) }), conditionRefusal},
					"its condition with a reason of 1025 characters":  {withOurs(func(c *corev1.NodeCondition) { c.Reason = strings.Repeat("R", 1025) }), conditionRefusal},
					"its condition with the status Maybe":             {withOurs(func(c *corev1.NodeCondition) { c.Status = "Maybe" }), conditionRefusal},
					// 1.5 MB of status made kubelet's own status updates too large for etcd.
					"its condition with a status of 1.5 MB": {withOurs(func(c *corev1.NodeCondition) {
						c.Status = corev1.ConditionStatus(strings.Repeat("T", 1571200))
					}), conditionRefusal},
					"its condition with a transition in the year 9999": {withOurs(func(c *corev1.NodeCondition) {
						c.LastTransitionTime = metav1.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
					}), conditionRefusal},
					"its condition with a heartbeat an hour ahead": {withOurs(func(c *corev1.NodeCondition) {
						c.LastHeartbeatTime = metav1.NewTime(time.Now().Add(time.Hour))
					}), conditionRefusal},
				}
				if a.conditionType == "" {
					refused["a condition, with none configured"] = struct {
						change func(*corev1.Node)
						tag    string
					}{withOurs(func(*corev1.NodeCondition) {}), statusRefusal}
				}
				for what, r := range refused {
					err := writeStatus(ctx, asAgent(own), own, r.change)
					Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want a denial, got %v", what, err)
					Expect(err.Error()).To(ContainSubstring(r.tag), what)
				}
				if a.conditionType == "" {
					return
				}
				err := writeStatus(ctx, asAgent(own), newNode(ctx), func(n *corev1.Node) {
					n.Status.Conditions = append(n.Status.Conditions, condition(ours, corev1.ConditionTrue))
				})
				Expect(err).To(MatchError(ContainSubstring(msgOtherNode)), "on another node")
				for _, status := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown} {
					Expect(writeStatus(ctx, asAgent(own), own, func(n *corev1.Node) {
						n.Status.Conditions = append(slices.Clone(kubeletConditions), condition(ours, status))
					})).To(Succeed(), "its own condition, %s", status)
				}
			})

			It("lets the real controller, as the agent, put its taint back and write its condition exactly when the install allows them",
				func(ctx SpecContext) {
					name := newNode(ctx)
					gate := &testkit.Switch{}
					conditionType := a.ownCondition()
					back := corev1.Taint{Key: a.taints[0].Key, Effect: corev1.TaintEffectNoSchedule}
					forbidden := testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(back.ToString(), metrics.ResultForbidden))
					refusedConditions := testutil.ToFloat64(metrics.Default().ConditionWrites.WithLabelValues(string(corev1.ConditionTrue), metrics.ResultForbidden))
					startAgent(a.config(name), name, a.taints, nil, func(r *controllers.NodeReconciler) {
						r.Groups[0].Gates, r.Groups[0].ConditionType, r.RetaintAfter = []gates.Gate{gate}, conditionType, time.Second
					})
					nodeNow := func(g Gomega) *corev1.Node {
						node := &corev1.Node{}
						g.Expect(k8sClient.Get(ctx, client.ObjectKey{Name: name}, node)).To(Succeed())
						// Less the taint the API server adds to every new Node, which no kubelet here clears.
						node.Spec.Taints = startuptaint.WithoutTaints(node.Spec.Taints, []startuptaint.TaintSpec{{Key: corev1.TaintNodeNotReady}})
						return node
					}
					Eventually(func(g Gomega) { g.Expect(nodeNow(g).Spec.Taints).To(Equal([]corev1.Taint{other})) }).Should(Succeed())
					gate.Set(false)
					// What the install allows is written; what the agent's flags ask for beyond it is
					// refused, and counted.
					wantTaints := []corev1.Taint{other}
					if a.retaintAfter != "" {
						wantTaints = []corev1.Taint{other, back}
					} else {
						Eventually(func() float64 {
							return testutil.ToFloat64(metrics.Default().Retaints.WithLabelValues(back.ToString(), metrics.ResultForbidden)) - forbidden
						}).Should(BeNumerically(">=", 1))
					}
					conditions := ConsistOf(And(HaveField("Type", corev1.NodeConditionType(conditionType)),
						HaveField("Status", corev1.ConditionFalse), HaveField("Reason", "SwitchNotReady")))
					if a.conditionType == "" {
						conditions = BeEmpty()
						Eventually(func() float64 {
							return testutil.ToFloat64(metrics.Default().ConditionWrites.WithLabelValues(string(corev1.ConditionTrue), metrics.ResultForbidden)) -
								refusedConditions
						}).Should(BeNumerically(">=", 1))
					}
					Eventually(func(g Gomega) {
						node := nodeNow(g)
						g.Expect(node.Spec.Taints).To(Equal(wantTaints))
						g.Expect(node.Status.Conditions).To(conditions)
					}).Should(Succeed())
					Consistently(func(g Gomega) {
						node := nodeNow(g)
						g.Expect(node.Spec.Taints).To(Equal(wantTaints))
						g.Expect(node.Status.Conditions).To(conditions)
					}, "1s").Should(Succeed())
					if a.retaintAfter == "" && a.conditionType == "" {
						return
					}
					gate.Set(true)
					Eventually(func(g Gomega) {
						node := nodeNow(g)
						g.Expect(node.Spec.Taints).To(Equal([]corev1.Taint{other}))
						if a.conditionType != "" {
							g.Expect(node.Status.Conditions).To(ConsistOf(HaveField("Status", corev1.ConditionTrue)))
						}
					}).Should(Succeed())
				})

			It("denies the agent's own removal without the node-name claim, and allows it with the claim", Label(testkit.BelowMinimum), func(ctx SpecContext) {
				own := newNode(ctx)
				err := patchNode(ctx, impersonating(a.user, a.groups, ""), own, removeStartup)
				Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
				Expect(err.Error()).To(ContainSubstring(msgNoNodeClaim))
				Expect(patchNode(ctx, asAgent(own), own, removeStartup)).To(Succeed())
			})

			It("lets the agent record events about its own Node", func(ctx SpecContext) {
				own := newNode(ctx)
				event := nodeEvent(own, metav1.NamespaceDefault, nodeRef(own))
				Expect(asAgent(own).Create(ctx, event, client.DryRunAll)).To(Succeed())
				Expect(patchEvent(ctx, asAgent(own), recordedEvent(ctx, own, startuptaint.EventSource+"-"+own), func(e *eventsv1.Event) {
					e.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NowMicro()}
				})).To(Succeed(), "counts a repeat of its own event")
				event = nodeEvent(own, metav1.NamespaceDefault, nodeRef(own))
				event.ReportingController = "kubelet"
				Expect(asAgent(own).Create(ctx, event, client.DryRunAll)).To(MatchError(ContainSubstring(msgEventReporter)))
			})

			It("keeps judging the agent while it also holds another role that grants nodes patch (a driver chart's own)", func(ctx SpecContext) {
				bindRole(ctx, nodesRole(ctx, prefix+"-driver-own-role"), a.namespace, a.serviceAccount)
				own := newNode(ctx)
				err := patchNode(ctx, asAgent(own), newNode(ctx), func(n *corev1.Node) { n.Labels["zone"] = "b" })
				Expect(err).To(MatchError(ContainSubstring(msgOtherNode)))
				Expect(patchNode(ctx, asAgent(own), own, removeStartup)).To(Succeed())
			})

			It("never blocks a kubelet's or an admin's Node writes while it is installed", func(ctx SpecContext) {
				nodeWritesWork(ctx, prefix+"-installed")
			})

			It("never blocks a kubelet's or an admin's Node writes with any one of its objects deleted", func(ctx SpecContext) {
				for i, obj := range objs {
					if obj.GetKind() == "Namespace" || !served(obj) {
						continue // deleted first by the uninstall spec, with everything else still there
					}
					Expect(k8sClient.Delete(ctx, obj.DeepCopy())).To(Succeed(), "delete %s %s", obj.GetKind(), obj.GetName())
					By("Node writes with " + obj.GetKind() + " " + obj.GetName() + " deleted")
					nodeWritesWork(ctx, fmt.Sprintf("%s-without-%d", prefix, i))
					Expect(k8sClient.Create(ctx, obj.DeepCopy())).To(Succeed(), "re-create %s %s", obj.GetKind(), obj.GetName())
				}
			})

			It("never judges another controller's service account, one with cluster-admin included", func(ctx SpecContext) {
				for account, roleName := range map[string]string{"cni-agent": nodesRole(ctx, prefix+"-cni-agent"), "gitops": "cluster-admin"} {
					bindRole(ctx, roleName, "kube-system", account)
					user, groups := serviceAccount("kube-system", account)
					own := newNode(ctx)
					// Its token is bound to a pod on another node, as a DaemonSet's would be.
					c := impersonating(user, groups, own+"-elsewhere")
					Eventually(func() error {
						return patchNode(ctx, c, own, func(n *corev1.Node) {
							removeStartup(n)
							n.Labels["example.com/cni"] = "ready"
							n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/cni-not-ready", Effect: corev1.TaintEffectNoSchedule})
						})
					}).Should(Succeed(), "%s labels and taints another node", account)
				}
			})

			It("uninstalls (make undeploy, a namespace deletion) without ever blocking Node writes, and then judges no one", Label(testkit.BelowMinimum), func(ctx SpecContext) {
				uninstall(ctx, objs, prefix+"-uninstall")
				own := newNode(ctx)
				Eventually(func(g Gomega) {
					err := patchNode(ctx, asAgent(own), own, removeStartup)
					g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the agent keeps no rights, got %v", err)
					g.Expect(err.Error()).To(ContainSubstring(msgRBAC))
					g.Expect(err.Error()).NotTo(ContainSubstring(startuptaint.PolicyMessagePrefix))
				}).Should(Succeed())
			})
		})
	}
})

var _ = Describe("pod reads", Label(testkit.RenderOnly), func() {
	// grantsPods lists the roles of a render that let their subjects read Pods.
	grantsPods := func(objs []*unstructured.Unstructured) []string {
		var out []string
		for _, obj := range objs {
			if obj.GetKind() != "Role" && obj.GetKind() != "ClusterRole" {
				continue
			}
			role := &rbacv1.ClusterRole{}
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, role)).To(Succeed())
			for _, rule := range role.Rules {
				if slices.ContainsFunc(rule.Resources, func(r string) bool { return r == "pods" || r == "*" }) {
					out = append(out, obj.GetKind()+" "+obj.GetNamespace()+"/"+obj.GetName())
				}
			}
		}
		return out
	}

	It("are granted by no install of the table but a --require-pod one's, in the namespace it reads, to its agent only", func() {
		for _, in := range installs {
			objs := in.render()
			if in.agentReads != "" {
				continue // the next spec's
			}
			if in.podReads == "" {
				Expect(grantsPods(objs)).To(BeEmpty(), in.name)
				continue
			}
			Expect(grantsPods(objs)).To(ConsistOf("Role "+in.podReads), in.name)
			a := agentOf(objs)
			var args []string
			for _, ds := range only[appsv1.DaemonSet](objs, "DaemonSet") {
				for _, c := range ds.Spec.Template.Spec.Containers {
					args = append(args, c.Args...)
				}
			}
			Expect(args).To(ContainElement(HavePrefix("--require-pod="+strings.Split(in.podReads, "/")[0]+"/")), in.name)
			bindings := only[rbacv1.RoleBinding](objs, "RoleBinding")
			Expect(bindings).To(HaveLen(1), in.name)
			Expect(bindings[0].Namespace + "/" + bindings[0].RoleRef.Name).To(Equal(in.podReads))
			Expect(bindings[0].Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Namespace: a.namespace, Name: a.serviceAccount}))
		}
	})

	// A --node-agents install reads DaemonSets and pods only in the namespaces whose DaemonSets
	// count (--node-agent-namespaces: kube-system and its own unless named), through a RoleBinding
	// in each; the install table asks the API server, as the agent, what that grant lets it read.
	It("are granted by a --node-agents install in the node agents' namespaces only, with a list of DaemonSets, to its agent only", func() {
		seen := 0
		for _, in := range installs {
			if in.agentReads == "" {
				continue
			}
			seen++
			objs := in.render()
			a := agentOf(objs)
			namespaces := nodeAgentNamespaces(objs, a)
			Expect(agentArgs(objs)).To(ContainElement(HavePrefix("--node-agents=")), in.name)
			Expect(grantsPods(objs)).To(ConsistOf("ClusterRole /"+in.agentReads), in.name)
			for _, role := range only[rbacv1.ClusterRole](objs, "ClusterRole") {
				if role.Name == in.agentReads {
					Expect(role.Rules).To(ConsistOf(
						rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, Verbs: []string{"list"}},
						rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}}), in.name)
				}
			}
			for _, b := range only[rbacv1.ClusterRoleBinding](objs, "ClusterRoleBinding") {
				Expect(b.RoleRef.Name).NotTo(Equal(in.agentReads), "%s: bound cluster-wide", in.name)
			}
			var bound []string
			for _, b := range only[rbacv1.RoleBinding](objs, "RoleBinding") {
				if b.RoleRef.Name == in.agentReads {
					bound = append(bound, b.Namespace)
					Expect(b.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Namespace: a.namespace, Name: a.serviceAccount}))
				}
			}
			Expect(bound).To(ConsistOf(namespaces), "%s: a RoleBinding in each namespace whose DaemonSets count", in.name)
		}
		Expect(seen).To(Equal(2), "the sample and the chart")
	})

	It("are granted by config/sidecar/ready-container, in the driver's namespace, to its service account only", func() {
		objs := render("testdata/ready-container-sidecar")
		a := agentOf(objs)
		Expect(grantsPods(objs)).To(ConsistOf("Role kube-system/startup-taint-remover-pod-reader-ebs-csi-node-sa"))
		bindings := only[rbacv1.RoleBinding](objs, "RoleBinding")
		Expect(bindings).To(HaveLen(1))
		Expect(bindings[0].Namespace).To(Equal("kube-system"))
		Expect(bindings[0].RoleRef.Name).To(Equal("startup-taint-remover-pod-reader-ebs-csi-node-sa"))
		Expect(bindings[0].Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Namespace: a.namespace, Name: a.serviceAccount}))
	})
})

var _ = Describe("a render that left the placeholders as words, as kustomize before v5.8 did", func() {
	It("fails closed for the agent's status writes as for its taints", func(ctx SpecContext) {
		objs := render("testdata/continuous-sidecar")
		a := agentOf(objs)
		Expect(a.conditionType).NotTo(BeEmpty(), "an install that names a condition, whose status writes the policy allows")
		for i, obj := range objs {
			if obj.GetKind() != "ValidatingAdmissionPolicy" {
				continue
			}
			policy := &admissionv1.ValidatingAdmissionPolicy{}
			Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, policy)).To(Succeed())
			broken, err := runtime.DefaultUnstructuredConverter.ToUnstructured(objects.AsOldRenders(policy))
			Expect(err).NotTo(HaveOccurred())
			objs[i] = &unstructured.Unstructured{Object: broken}
		}
		applyUntilDone(ctx, objs)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "old-render"},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{startupTaint(a.taints[0])}}}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
		kubeletConditions := []corev1.NodeCondition{condition(string(corev1.NodeReady), corev1.ConditionTrue),
			condition(string(corev1.NodeMemoryPressure), corev1.ConditionFalse), condition(string(corev1.NodeNetworkUnavailable), corev1.ConditionFalse)}
		Expect(writeStatus(ctx, kubelet(ctx, node.Name), node.Name, func(n *corev1.Node) { n.Status.Conditions = kubeletConditions })).To(Succeed())

		const settings = "cannot work with the settings this policy was rendered with (taints '" // and the rest, as rendered
		asAgent := asAgentOn(a, node.Name)
		refusedOnceLoaded(ctx, asAgent, node.Name, func(n *corev1.Node) {
			n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, a.taints)
		}, ContainSubstring(settings), "the taints")
		for what, change := range map[string]func(*corev1.Node){
			"the condition the placeholder names": func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, condition("CONDITIONTYPE", corev1.ConditionTrue))
			},
			"the condition the install names": func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, condition(a.ownCondition(), corev1.ConditionTrue))
			},
			"NetworkUnavailable replaced by a copy of MemoryPressure": func(n *corev1.Node) {
				n.Status.Conditions = []corev1.NodeCondition{n.Status.Conditions[0], n.Status.Conditions[1], n.Status.Conditions[1]}
			},
		} {
			err := writeStatus(ctx, asAgent, node.Name, change)
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "%s: want a denial, got %v", what, err)
			Expect(err.Error()).To(ContainSubstring(settings), what)
		}
	})
})

// A render whose settings Kubernetes or the agent would refuse (a kubelet condition as the agent's,
// a taint key that is not a qualified name) gets a policy that refuses the agent's every request,
// as the agent itself exits with status 2 on such flags.
var _ = Describe("a render with settings the agent refuses", func() {
	It("fails closed: the policy refuses the agent's removal and its condition, naming the settings", func(ctx SpecContext) {
		objs := render("testdata/continuous-sidecar")
		a := agentOf(objs)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bad-settings"},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{startupTaint(a.taints[0])}}}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, node))).To(Succeed()) })
		var policy *admissionv1.ValidatingAdmissionPolicy
		for _, p := range only[admissionv1.ValidatingAdmissionPolicy](objs, "ValidatingAdmissionPolicy") {
			if strings.Contains(p.Name, "own-node-only") {
				policy = p
			}
		}
		Expect(policy).NotTo(BeNil())
		for n, setting := range []struct{ variable, value string }{
			{"conditionType", string(corev1.NodeReady)},
			{"conditionType", string(corev1.NodeMemoryPressure)},
			{"conditionType", string(corev1.NodeNetworkUnavailable)},
			{"conditionType", a.ownCondition() + ",PIDPressure"},
			{"taintList", "example.com/" + strings.Repeat("n", 64)},
			{"taintList", "bad..prefix.example.com/agent-not-ready"},
			{"taintList", a.taintList + "," + strings.Repeat("p", 254) + "/x"},
		} {
			bad := policy.DeepCopy()
			bad.ObjectMeta = metav1.ObjectMeta{Name: fmt.Sprintf("bad-settings-%d", n)}
			for i, v := range bad.Spec.Variables {
				if v.Name == setting.variable {
					bad.Spec.Variables[i].Expression = "'" + setting.value + "'"
				}
			}
			binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: bad.Name},
				Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: bad.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
			Expect(k8sClient.Create(ctx, bad)).To(Succeed())
			Expect(k8sClient.Create(ctx, binding)).To(Succeed())
			// Installed alone, as a render of its own would be: the agent's RBAC grant stands in.
			bindRole(ctx, nodesRole(ctx, bad.Name), a.namespace, a.serviceAccount)
			grant := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: bad.Name + "-grant"}, Rules: []rbacv1.PolicyRule{{
				APIGroups: []string{"startup-taint-remover.github.io"}, Resources: []string{"startuptaints"},
				ResourceNames: []string{a.taintList}, Verbs: []string{"remove"}}}}
			Expect(k8sClient.Create(ctx, grant)).To(Succeed())
			bindRole(ctx, grant.Name, a.namespace, a.serviceAccount)
			settings := "'" + setting.value + "'"
			refusedOnceLoaded(ctx, asAgentOn(a, node.Name), node.Name, func(n *corev1.Node) {
				n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, a.taints)
			}, And(ContainSubstring(tagged(startuptaint.RefusalSettings)), ContainSubstring(settings)), "%s %s", setting.variable, setting.value)
			Expect(k8sClient.Delete(ctx, binding)).To(Succeed())
			Expect(k8sClient.Delete(ctx, bad)).To(Succeed())
			Expect(k8sClient.Delete(ctx, grant)).To(Succeed())
		}
	})
})

// unjudgedInstalls are install paths that leave the agent unjudged: a recipe broken on purpose,
// and a chart whose policy was turned off. The agent's own confinement check must say so.
var unjudgedInstalls = []struct {
	name string
	install
	// why checks the rendered objects for the reason the agent goes unjudged.
	why func(a agent, objs []*unstructured.Unstructured)
}{
	{"a sidecar recipe that binds the agent's RBAC to the wrong account", install{dir: "testdata/wrong-account-sidecar"},
		func(a agent, objs []*unstructured.Unstructured) {
			for _, b := range only[rbacv1.ClusterRoleBinding](objs, "ClusterRoleBinding") {
				Expect(b.Subjects).NotTo(ContainElement(HaveField("Name", a.serviceAccount)), "the broken recipe binds another account")
			}
		}},
	{"the Helm chart with admissionPolicy.enabled=false", install{dir: chartDir,
		chart: &chartRelease{name: "nopolicy", namespace: "nopolicy", sets: []string{"admissionPolicy.enabled=false"}}},
		func(_ agent, objs []*unstructured.Unstructured) {
			Expect(only[admissionv1.ValidatingAdmissionPolicy](objs, "ValidatingAdmissionPolicy")).To(BeEmpty())
		}},
}

var _ = Describe("install paths that leave the agent unjudged", func() {
	for i, in := range unjudgedInstalls {
		It(in.name+": the agent's own confinement check says so", func(ctx SpecContext) {
			objs := in.render()
			a := agentOf(objs)
			in.why(a, objs)
			apply(ctx, objs)
			DeferCleanup(func(ctx SpecContext) {
				for _, obj := range objs {
					Expect(deleteObject(ctx, obj)).To(Succeed())
				}
			})
			// The driver's chart gives its node plugin a nodes patch role of its own, as the EFS chart does.
			bindRole(ctx, nodesRole(ctx, fmt.Sprintf("unjudged%d-driver-role", i)), a.namespace, a.serviceAccount)
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unjudged%d-node", i), Labels: map[string]string{"zone": "a"}}}
			Expect(k8sClient.Create(ctx, node)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, node)).To(Succeed()) })

			check := &controllers.ConfinementCheck{Client: impersonating(a.user, a.groups, node.Name), NodeName: node.Name}
			Eventually(func(g Gomega) string {
				outcome, _, err := check.Check(ctx)
				g.Expect(err).NotTo(HaveOccurred())
				return outcome
			}).Should(Equal(controllers.NotConfined))
			Expect(patchNode(ctx, impersonating(a.user, a.groups, "elsewhere"), node.Name, func(n *corev1.Node) { n.Labels["zone"] = "b" })).
				To(Succeed(), "unjudged, the agent's account may relabel any node")
		})
	}
})

// nodesRole creates a ClusterRole that may read and patch every Node, as node agents' own charts
// grant, until the spec ends, and returns its name.
func nodesRole(ctx context.Context, name string) string {
	GinkgoHelper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch", "update"}}}}
	Expect(k8sClient.Create(ctx, role)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, role)).To(Succeed()) })
	return name
}

// bindRole binds the ClusterRole role to the service account namespace/account until the spec ends.
func bindRole(ctx context.Context, role, namespace, account string) {
	GinkgoHelper()
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role + "-" + namespace + "-" + account},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: account, Namespace: namespace}}}
	Expect(k8sClient.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, binding)).To(Succeed()) })
}

var _ = Describe("the confinement check, with no policy judging the agent", func() {
	newUnconfinedNode := func(ctx context.Context, name string) *corev1.Node {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoExecute}}}}
		Expect(k8sClient.Create(ctx, node)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, node)).To(Succeed()) })
		return node
	}
	specs := []startuptaint.TaintSpec{{Key: "example.com/agent-not-ready"}}

	It("finds an admin not confined, warns with an event, and keeps working", func(ctx SpecContext) {
		node := newUnconfinedNode(ctx, "unconfined-node")
		metrics.Default().Confined.Set(1)
		done := startAgent(cfg, node.Name, specs, controllers.NewConfinementCheck(false))
		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
			g.Expect(list.Items).To(ContainElement(And(
				HaveField("Reason", startuptaint.EventReasonNotConfined), HaveField("Type", corev1.EventTypeWarning),
				HaveField("Regarding.Name", node.Name))))
		}).Should(Succeed())
		Expect(testutil.ToFloat64(metrics.Default().Confined)).To(Equal(0.0))
		Eventually(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
			g.Expect(startuptaint.MatchingTaints(node.Spec.Taints, specs)).To(BeEmpty())
		}).Should(Succeed())
		Expect(node.Labels).NotTo(HaveKey(startuptaint.ConfinementProbeLabel), "the check is a dry run")
		Consistently(done, "200ms").ShouldNot(Receive())
	})

	It("holds every write, says why and is not ready, when confinement is required, and keeps running", func(ctx SpecContext) {
		node := newUnconfinedNode(ctx, "unconfined-required-node")
		metrics.Default().Confined.Set(1)
		confinement := controllers.NewConfinementCheck(true)
		done := startAgent(cfg, node.Name, specs, confinement, func(r *controllers.NodeReconciler) {
			r.Groups[0].ConditionType = "example.com/AgentReady"
		})
		Eventually(func(g Gomega) {
			list := &eventsv1.EventList{}
			g.Expect(k8sClient.List(ctx, list, client.InNamespace(metav1.NamespaceDefault))).To(Succeed())
			g.Expect(list.Items).To(ContainElement(And(
				HaveField("Reason", startuptaint.EventReasonNotConfined), HaveField("Type", corev1.EventTypeWarning),
				HaveField("Regarding.Name", node.Name),
				HaveField("Note", ContainSubstring("confinement is required: it removes no startup taint and writes nothing")))))
		}).Should(Succeed())
		Expect(testutil.ToFloat64(metrics.Default().Confined)).To(Equal(0.0))
		Expect(confinement.Ready(nil)).To(MatchError(ContainSubstring("confinement is required")))
		Consistently(func(g Gomega) {
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
			g.Expect(startuptaint.MatchingTaints(node.Spec.Taints, specs)).NotTo(BeEmpty())
			g.Expect(node.Status.Conditions).To(BeEmpty())
		}, "2s").Should(Succeed(), "no taint removed and no condition written")
		Expect(done).NotTo(Receive(), "the agent keeps running, and keeps checking")
	})

	It("finds a conditions-only agent not confined by asking for a condition not its own, in a dry run", func(ctx SpecContext) {
		node := newUnconfinedNode(ctx, "unconfined-conditions-node")
		check := &controllers.ConfinementCheck{Client: k8sClient, NodeName: node.Name, Conditions: []string{"example.com/AgentReady"}}
		outcome, _, err := check.Check(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome).To(Equal(controllers.NotConfined))
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
		Expect(node.Status.Conditions).To(BeEmpty(), "the check is a dry run")
	})

	It("cannot tell for an identity that may not write Nodes at all", func(ctx SpecContext) {
		user, groups := serviceAccount("nowhere", "nobody")
		check := &controllers.ConfinementCheck{Client: impersonating(user, groups, "n"), NodeName: "n"}
		outcome, _, err := check.Check(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(outcome).To(Equal(controllers.CannotWrite))
	})
})

// condition is a Node condition as the agent writes it.
func condition(t string, status corev1.ConditionStatus) corev1.NodeCondition {
	return corev1.NodeCondition{Type: corev1.NodeConditionType(t), Status: status, Reason: "Test", Message: "test",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
}

// writeStatus changes the status of the Node name, read as an admin, with one merge patch of the
// status subresource sent through c.
// nodeAgentNamespaces are the namespaces whose DaemonSets the agent of a rendered install counts:
// its --node-agent-namespaces, or the agent's default for its namespace.
func nodeAgentNamespaces(objs []*unstructured.Unstructured, a agent) []string {
	for _, arg := range agentArgs(objs) {
		if v, ok := strings.CutPrefix(arg, "--node-agent-namespaces="); ok {
			return strings.Split(v, ",")
		}
	}
	return gates.DefaultNodeAgentNamespaces(a.namespace)
}

func writeStatus(ctx context.Context, c client.Client, name string, change func(*corev1.Node)) error {
	node := &corev1.Node{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Name: name}, node); err != nil {
		return err
	}
	orig := node.DeepCopy()
	change(node)
	return c.Status().Patch(ctx, node, client.MergeFrom(orig))
}

// nodeRef is a reference to a Node, as an event recorder writes it.
func nodeRef(name string) corev1.ObjectReference {
	return corev1.ObjectReference{APIVersion: "v1", Kind: "Node", Name: name}
}

// nodeEvent is an event as the agent on node records it, in namespace, about regarding: reported
// by the instance client-go names after the host, here a host-network pod's.
func nodeEvent(node, namespace string, regarding corev1.ObjectReference) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "test-", Namespace: namespace},
		EventTime:  metav1.NowMicro(), ReportingController: startuptaint.EventSource, ReportingInstance: startuptaint.EventSource + "-" + node,
		Action: "RemoveTaint", Reason: startuptaint.EventReasonTaintRemoved, Type: corev1.EventTypeNormal, Regarding: regarding,
	}
}

// withoutField is the field tree fields less the field at path, where it has one.
func withoutField(fields *metav1.FieldsV1, path ...string) *metav1.FieldsV1 {
	GinkgoHelper()
	tree := map[string]any{}
	Expect(json.Unmarshal(fields.GetRawBytes(), &tree)).To(Succeed())
	at := tree
	for _, p := range path[:len(path)-1] {
		next, ok := at[p].(map[string]any)
		if !ok {
			return fields
		}
		at = next
	}
	delete(at, path[len(path)-1])
	raw, err := json.Marshal(tree)
	Expect(err).NotTo(HaveOccurred())
	return metav1.NewFieldsV1(string(raw))
}

// recordedEvent records, as an admin, an event about node reported by instance, as the agent's
// recorder would, and returns it.
func recordedEvent(ctx context.Context, node, instance string) *eventsv1.Event {
	GinkgoHelper()
	event := nodeEvent(node, metav1.NamespaceDefault, nodeRef(node))
	event.ReportingInstance = instance
	Expect(k8sClient.Create(ctx, event)).To(Succeed())
	return event
}

// patchEvent changes event with one merge patch sent through c, as the recorder counts a repeat.
func patchEvent(ctx context.Context, c client.Client, event *eventsv1.Event, change func(*eventsv1.Event)) error {
	orig := event.DeepCopy()
	change(event)
	return c.Patch(ctx, event, client.MergeFrom(orig))
}

// managedEntry is an ownership record of manager, for operation on v1 (and subresource), owning
// the field tree fields, as a writer of managedFields would forge it.
// addAppliers adds server-side apply entries, each owning a label of its own, until the Node holds
// total managedFields entries.
func addAppliers(n *corev1.Node, total int) {
	for i := len(n.ManagedFields); i < total; i++ {
		n.ManagedFields = append(n.ManagedFields, managedEntry(fmt.Sprintf("example.com/applier-%03d", i), metav1.ManagedFieldsOperationApply, "",
			fmt.Sprintf(`{"f:metadata":{"f:labels":{"f:example.com/l%03d":{}}}}`, i)))
	}
}

func managedEntry(manager string, operation metav1.ManagedFieldsOperationType, subresource, fields string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: operation, APIVersion: "v1", Subresource: subresource,
		FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(fields)}
}
