// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/controllers"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// The policy's cost must not depend on what others wrote on the Node: a rule whose cost grows
// with the square of a list, or that the CEL cost limit stops, would refuse an agent because of an
// admin's annotation, or, written by one agent, refuse another install's. The Node here is as large
// as the API server stores: an annotation at the 256 KiB limit of all annotations, 1,500
// conditions, and as many server-side apply entries as the policy reads
// (startuptaint.MaxManagedFieldsEntries, with room for the agents' own two); one entry more, and
// the agent's writes are refused by a rule of their own, at the same bounded cost.
var _ = Describe("a Node as large as the API server accepts, written by an admin", Ordered, func() {
	const (
		// annotationBytes stays under the 256 KiB the API server allows all of a Node's annotations.
		annotationBytes = 250 << 10
		conditions      = 1500 // about 300 bytes each
		// Apply entries, about 350 bytes each (the API server caps Update ones at 10): the bound,
		// less the admin's two Update entries and the agents' two.
		applyManagers = startuptaint.MaxManagedFieldsEntries - 4
	)
	var (
		first, second agent
		node          = "largest-node"
	)

	BeforeAll(func(ctx SpecContext) {
		// Two installs side by side: config/default, and a chart release whose agent also writes
		// a condition per group.
		for _, in := range installs {
			switch in.name {
			case "config/default":
				objs := in.render()
				first = agentOf(objs)
				applyUntilDone(ctx, objs)
			case "the Helm chart for EBS and EFS on one node, with continuous mode and a condition per group":
				objs := in.render()
				second = agentOf(objs)
				applyUntilDone(ctx, objs)
			}
		}
		Expect(first.taints).NotTo(BeEmpty())
		Expect(second.conditionType).To(ContainSubstring(","), "a condition per group")
		// The API server picks a new policy up shortly after it is created.
		probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node + "-probe"}}
		Expect(k8sClient.Create(ctx, probe)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, probe))).To(Succeed()) })
		for _, a := range []agent{first, second} {
			refusedOnceLoaded(ctx, asAgentOn(a, "elsewhere"), probe.Name, func(n *corev1.Node) { n.Labels = map[string]string{"x": "y"} },
				ContainSubstring(msgOtherNode))
		}

		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
		for _, spec := range append(append([]startuptaint.TaintSpec{}, first.taints...), second.groupTaints[1]...) {
			n.Spec.Taints = append(n.Spec.Taints, startupTaint(spec))
		}
		Expect(k8sClient.Create(ctx, n)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, n))).To(Succeed()) })

		By("an admin filling the removed record, the conditions and managedFields")
		var record strings.Builder
		for i := 0; record.Len() < annotationBytes; i++ {
			fmt.Fprintf(&record, "example.com/junk-%06d,", i)
		}
		// The junk entries first, so the agents' own entries still need appending.
		Expect(patchNode(ctx, k8sClient, node, func(n *corev1.Node) {
			n.Annotations = map[string]string{startuptaint.RemovedAnnotation: strings.TrimSuffix(record.String(), ",")}
		})).To(Succeed())
		now := metav1.Now()
		Expect(writeStatus(ctx, k8sClient, node, func(n *corev1.Node) {
			for i := range conditions {
				n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{
					Type: corev1.NodeConditionType(fmt.Sprintf("example.com/Condition%05d", i)), Status: corev1.ConditionTrue,
					Reason: "Filled", Message: strings.Repeat("m", 160), LastHeartbeatTime: now, LastTransitionTime: now})
			}
		})).To(Succeed())
		Expect(patchNode(ctx, k8sClient, node, func(n *corev1.Node) {
			for i := range applyManagers {
				n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{
					Manager: fmt.Sprintf("example.com/applier-%05d", i), Operation: metav1.ManagedFieldsOperationApply,
					APIVersion: "v1", FieldsType: "FieldsV1", Time: &now,
					FieldsV1: metav1.NewFieldsV1(fmt.Sprintf(`{"f:metadata":{"f:labels":{"f:example.com/label-%05d":{}}},`+
						`"f:status":{"f:conditions":{"k:{\"type\":\"example.com/Condition%05d\"}":{".":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}}}}`,
						i, i%conditions)),
				})
			}
		})).To(Succeed())
		stored := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, stored)).To(Succeed())
		data, err := json.Marshal(stored)
		Expect(err).NotTo(HaveOccurred())
		managed, err := json.Marshal(stored.ManagedFields)
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("largest Node", fmt.Sprintf("%d bytes: a %d-byte removed record, %d conditions, %d managedFields entries (%d bytes)",
			len(data), len(stored.Annotations[startuptaint.RemovedAnnotation]), len(stored.Status.Conditions), len(stored.ManagedFields), len(managed)))
		Expect(len(data)).To(BeNumerically(">", 768<<10), "a Node over 768 KiB")
		Expect(stored.ManagedFields).To(HaveLen(applyManagers+2), "every entry stored, and the admin's own two")
	})

	timed := func(what string, write func() error) {
		GinkgoHelper()
		start := time.Now()
		Expect(write()).To(Succeed(), what)
		AddReportEntry(what, time.Since(start).Round(time.Millisecond).String())
	}

	It("admits each agent's own removal (the reconciler's own patch, in a dry run) and the second agent's condition", func(ctx SpecContext) {
		for _, a := range []struct {
			agent
			taints []startuptaint.TaintSpec
		}{{first, first.taints}, {second, second.groupTaints[1]}} {
			check := &controllers.ConfinementCheck{Client: asAgentOn(a.agent, node), NodeName: node,
				Taints: func() []startuptaint.TaintSpec { return a.taints }}
			timed(fmt.Sprintf("the removal of %v", a.taints), func() error {
				_, refusal, err := check.CheckRemoval(ctx)
				if err != nil {
					return err
				}
				return refusal
			})
		}
		timed("the second install's condition", func() error {
			return writeStatus(ctx, asAgentOn(second, node), node, func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, condition(strings.Split(second.conditionType, ",")[1], corev1.ConditionTrue))
			})
		})
	})

	It("never judges kubelet's or an admin's writes on it", func(ctx SpecContext) {
		timed("kubelet's status write", func() error {
			return writeStatus(ctx, kubelet(ctx, node), node, func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, condition(string(corev1.NodeReady), corev1.ConditionTrue))
			})
		})
		timed("an admin's label and cordon", func() error {
			return patchNode(ctx, k8sClient, node, func(n *corev1.Node) {
				n.Labels = map[string]string{"example.com/pool": "a"}
				n.Spec.Unschedulable = true
			})
		})
	})

	It("still refuses, by its rule, what the agent must never do on it", func(ctx SpecContext) {
		asFirst := asAgentOn(first, node)
		err := patchNode(ctx, asFirst, node, func(n *corev1.Node) {
			n.Annotations[startuptaint.RemovedAnnotation] += "," + first.taints[0].String()
		})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
		Expect(err.Error()).To(ContainSubstring(msgRemovedRecord))
		err = patchNode(ctx, asFirst, node, func(n *corev1.Node) {
			n.ManagedFields[len(n.ManagedFields)/2].FieldsV1 = metav1.NewFieldsV1(`{"f:spec":{"f:unschedulable":{}}}`)
		})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want a denial, got %v", err)
		Expect(err.Error()).To(ContainSubstring(msgGained))
	})

	It("refuses the agent's writes once the Node holds one entry more, saying how to clear them, and an admin can", func(ctx SpecContext) {
		Expect(patchNode(ctx, k8sClient, node, func(n *corev1.Node) { addAppliers(n, startuptaint.MaxManagedFieldsEntries+1) })).To(Succeed())
		stored := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, stored)).To(Succeed())
		Expect(stored.ManagedFields).To(HaveLen(startuptaint.MaxManagedFieldsEntries + 1))
		check := &controllers.ConfinementCheck{Client: asAgentOn(first, node), NodeName: node,
			Taints: func() []startuptaint.TaintSpec { return first.taints }}
		_, refusal, err := check.CheckRemoval(ctx)
		Expect(err).NotTo(HaveOccurred())
		// The removal adds the agent's own entry.
		Expect(refusal).To(MatchError(And(ContainSubstring(msgBound),
			ContainSubstring(fmt.Sprintf("more than %d managedFields entries, the entry its own write adds counted (it had %d and would have %d)", startuptaint.MaxManagedFieldsEntries,
				startuptaint.MaxManagedFieldsEntries+1, startuptaint.MaxManagedFieldsEntries+2)),
			ContainSubstring(`kubectl patch node `+node+` --type=json -p '[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]'`))))
		timed("kubelet's status write beside them", func() error {
			return writeStatus(ctx, kubelet(ctx, node), node, func(n *corev1.Node) {
				n.Status.Conditions = append(n.Status.Conditions, condition(string(corev1.NodeReady), corev1.ConditionFalse))
			})
		})

		By("an admin clearing them as the refusal says, with kubectl")
		_, err = kubectl("patch", "node", node, "--type=json", "-p", `[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]`)
		Expect(err).NotTo(HaveOccurred())
		_, refusal, err = check.CheckRemoval(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(refusal).NotTo(HaveOccurred())
	})
})

// The boot record is any Node writer's to fill (an admin, kubelet, tooling), and the policy pairs
// its entries, so it reads one only within startuptaint's bounds: whatever is stored, the agent's
// own writes are judged, never stopped by the CEL cost limit, and a request that leaves the record
// alone is admitted.
var _ = Describe("a Node whose boot record another writer filled", Ordered, func() {
	var a agent

	BeforeAll(func(ctx SpecContext) {
		for _, in := range installs {
			if in.name == "config/default" {
				objs := in.render()
				a = agentOf(objs)
				applyUntilDone(ctx, objs)
			}
		}
		Expect(a.taints).NotTo(BeEmpty())
		probe := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "boot-record-probe"}}
		Expect(k8sClient.Create(ctx, probe)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, probe))).To(Succeed()) })
		refusedOnceLoaded(ctx, asAgentOn(a, "elsewhere"), probe.Name, func(n *corev1.Node) { n.Labels = map[string]string{"x": "y"} },
			ContainSubstring(msgOtherNode))
	})

	key := func() string { return a.taints[0].Key }
	DescribeTable("judges the agent's writes, never errs",
		func(ctx SpecContext, node string, record func() string) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Annotations: map[string]string{startuptaint.BootAnnotation: record()}}}
			for _, spec := range a.taints {
				n.Spec.Taints = append(n.Spec.Taints, startupTaint(spec))
			}
			Expect(k8sClient.Create(ctx, n)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, n))).To(Succeed()) })
			Expect(writeStatus(ctx, k8sClient, node, func(n *corev1.Node) { n.Status.NodeInfo.BootID = "boot-2" })).To(Succeed())
			stored := &corev1.Node{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: node}, stored)).To(Succeed())
			readable := startuptaint.BootRecordReadable(stored.Annotations[startuptaint.BootAnnotation])
			AddReportEntry(node, fmt.Sprintf("a boot record of %d bytes, %d entries, readable: %v", len(stored.Annotations[startuptaint.BootAnnotation]),
				strings.Count(stored.Annotations[startuptaint.BootAnnotation], ",")+1, readable))

			asAgent := asAgentOn(a, node)
			By("the reconciler's own removal, in a dry run: admitted, recording this boot only where the record is readable")
			check := &controllers.ConfinementCheck{Client: asAgent, NodeName: node, Taints: func() []startuptaint.TaintSpec { return a.taints }}
			_, refusal, err := check.CheckRemoval(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(refusal).NotTo(HaveOccurred())
			By("the confinement check's probe: refused by its rule")
			err = patchNode(ctx, asAgent, node, func(n *corev1.Node) { n.Labels = map[string]string{startuptaint.ConfinementProbeLabel: "x"} },
				client.DryRunAll)
			Expect(err).To(MatchError(ContainSubstring(msgMetadata)))
			By("a removal that writes its own entry: admitted within the bounds, refused beyond them, with the policy's message")
			err = patchNode(ctx, asAgent, node, func(n *corev1.Node) {
				n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, a.taints)
				n.Annotations[startuptaint.BootAnnotation] = key() + "=boot-2"
			}, client.DryRunAll)
			if readable {
				Expect(err).To(MatchError(ContainSubstring(msgBootRecord)), "it changes other entries")
				Expect(err).NotTo(MatchError(ContainSubstring("4096")))
			} else {
				Expect(err).To(MatchError(And(ContainSubstring(msgBootRecord), ContainSubstring("more than 4096 characters or 64 entries"),
					ContainSubstring("kubectl annotate node "+node+" "+startuptaint.BootAnnotation+"-"))))
			}
		},
		Entry("64 entries, the most it reads", "boot-record-64-entries", func() string { return strings.Repeat("example.com/x=boot-0,", 63) + key() + "=boot-1" }),
		Entry("8 KB repeating the agent's own key", "boot-record-8kb", func() string { return strings.Repeat(key()+"=boot-1,", 8<<10/len(key()+"=boot-1,")) }),
		Entry("20 KB of empty entries", "boot-record-20kb", func() string { return strings.Repeat(",", 20<<10) }),
		Entry("100,000 empty entries", "boot-record-100k-entries", func() string { return strings.Repeat(",", 100_000) }),
		Entry("the annotations' 256 KiB limit, less room for the removed record", "boot-record-256kib", func() string { return strings.Repeat(",", 256<<10-len(startuptaint.BootAnnotation)-512) }),
	)
})

// asAgentOn is a client acting as a's pod on node. It writes as the agent's field manager, which
// the policy trusts with the fields the agent writes.
func asAgentOn(a agent, node string) client.Client {
	GinkgoHelper()
	return client.WithFieldOwner(impersonating(a.user, a.groups, node), startuptaint.FieldManager)
}

// applyUntilDone applies the rendered objects and deletes them when the container ends, their
// namespaces to the end, so that another spec can install them again.
func applyUntilDone(ctx context.Context, objs []*unstructured.Unstructured) {
	GinkgoHelper()
	apply(ctx, objs)
	DeferCleanup(func(ctx SpecContext) {
		for _, obj := range objs {
			Expect(deleteObject(ctx, obj)).To(Succeed())
		}
		for _, obj := range objs {
			if obj.GetKind() == "Namespace" {
				finalizeNamespace(ctx, obj.GetName())
			}
		}
	})
}
