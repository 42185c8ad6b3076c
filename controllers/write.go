// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// Every write the agent makes to its Node: the taints' patch, which carries the removed and boot
// records with it, and the Node condition. Each is built here once (writeTaints, writeCondition):
// the reconciler sends them, and the confinement check sends the same bytes as a dry run, so the
// check asks about exactly what the agent does.

// writeTaints sends node's taints, changed from orig, as a merge patch locked to orig's
// resourceVersion: a merge patch replaces the whole list, and the lock makes it fail instead of
// dropping a taint another writer added since orig was read.
func writeTaints(ctx context.Context, c client.Client, orig, node *corev1.Node, opts ...client.PatchOption) error {
	return c.Patch(ctx, node, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}),
		append([]client.PatchOption{client.FieldOwner(startuptaint.FieldManager)}, opts...)...)
}

// writeCondition sends want into node's status as a strategic merge patch that carries only
// want: conditions merge by type, so it cannot undo a concurrent write of kubelet's own
// conditions, and needs no resourceVersion lock.
func writeCondition(ctx context.Context, c client.Client, node *corev1.Node, want corev1.NodeCondition,
	opts ...client.SubResourcePatchOption) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{want}}})
	if err != nil {
		return fmt.Errorf("encoding condition %s: %w", want.Type, err)
	}
	return c.Status().Patch(ctx, node, client.RawPatch(types.StrategicMergePatchType, patch),
		append([]client.SubResourcePatchOption{client.FieldOwner(startuptaint.FieldManager)}, opts...)...)
}

// write sends the plans' changes to the Node in one locked patch, and returns what it did for
// each plan, in their order. When that patch is refused and carries several groups' changes, each
// is sent alone, so a group the admission policy refuses (an install that does not list its taint)
// holds back only itself.
func (r *NodeReconciler) write(ctx context.Context, node *corev1.Node, plans []*plan) []wrote {
	if len(plans) == 0 {
		return nil
	}
	base := node.DeepCopy()
	orig, err := r.patchTaints(ctx, node, func(n *corev1.Node) {
		for _, p := range plans {
			p.apply(n)
		}
	}, func(orig *corev1.Node) { r.reportConflict(orig, plans) })
	out := make([]wrote, len(plans))
	if err != nil && len(plans) > 1 && refused(err) {
		for i, p := range plans {
			out[i] = r.write(ctx, base.DeepCopy(), []*plan{p})[0]
		}
		return out
	}
	written := r.wired.clock.Now()
	for i := range out {
		out[i] = wrote{orig: orig, err: err, written: written}
	}
	return out
}

// conflictBackoff spaces the retries of a patch that lost a race with another writer; jitter
// keeps two agents that conflict once from conflicting again in lockstep.
var conflictBackoff = wait.Backoff{Steps: 8, Duration: 10 * time.Millisecond, Factor: 1.5, Jitter: 1}

// patchTaints applies change to node and sends the result, when its taints differ, as a merge
// patch locked to the resourceVersion it was read at, reading the Node again from the API server
// after each conflict. It returns the Node as it was before the change it sent, or nil when the
// change made no difference or the Node is gone. conflict, when set, sees each conflict.
func (r *NodeReconciler) patchTaints(ctx context.Context, node *corev1.Node, change func(*corev1.Node),
	conflict func(orig *corev1.Node)) (*corev1.Node, error) {
	var sent *corev1.Node
	first := true
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		if !first {
			// The cache lost the race; read the Node as the API server has it now.
			if err := r.wired.apiReader.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
				return err
			}
		}
		first = false
		orig := node.DeepCopy()
		change(node)
		// Skipped when it changes nothing: the taints and the boot record are all it writes (the
		// removed record changes only with the taints).
		if equality.Semantic.DeepEqual(orig.Spec.Taints, node.Spec.Taints) &&
			orig.Annotations[startuptaint.BootAnnotation] == node.Annotations[startuptaint.BootAnnotation] {
			sent = nil
			return nil
		}
		err := writeTaints(ctx, r.wired.client, orig, node)
		if apierrors.IsConflict(err) && conflict != nil {
			conflict(orig)
		}
		if err != nil {
			return err
		}
		sent = orig
		return nil
	})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return sent, err
}

// apply makes the plan's change to n.
func (p *plan) apply(n *corev1.Node) {
	switch {
	case p.putBack != nil:
		if len(startuptaint.MatchingTaints(n.Spec.Taints, []startuptaint.TaintSpec{*p.putBack})) == 0 {
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: p.putBack.Key, Effect: p.putBack.Effect})
		}
	case p.remove:
		removeTaints(n, p.specs)
	case p.recordBoot:
		recordBoot(n, startuptaint.SpecKeys(p.specs))
	}
}

// removeTaints removes the taints specs select from n, and records them in
// startuptaint.RemovedAnnotation and this boot in startuptaint.BootAnnotation: the change a removal
// sends, and the one the confinement check asks the API server about.
func removeTaints(n *corev1.Node, specs []startuptaint.TaintSpec) {
	selecting := startuptaint.SpecsSelecting(n.Spec.Taints, specs)
	if len(selecting) == 0 {
		return
	}
	// In the same patch, so a later process knows these were removed once (see
	// startuptaint.RemovedAnnotation), and in which boot (see startuptaint.BootAnnotation).
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[startuptaint.RemovedAnnotation] = withRemoved(n, selecting)
	recordBoot(n, startuptaint.SpecKeys(specs))
	n.Spec.Taints = startuptaint.WithoutTaints(n.Spec.Taints, specs)
}

// withRemoved returns startuptaint.RemovedAnnotation's value with the specs it does not list yet
// appended, each once. The value is only ever appended to: the admission policy checks an addition
// by its prefix, at a cost that does not grow with what other writers put before it.
func withRemoved(node *corev1.Node, specs []startuptaint.TaintSpec) string {
	all := startuptaint.RemovedRecord(node)
	value := node.Annotations[startuptaint.RemovedAnnotation]
	for _, spec := range specs {
		s := spec.String()
		switch {
		case slices.Contains(all, s):
		case value == "":
			value = s
		default:
			value += "," + s
		}
		all = append(all, s)
	}
	return value
}

// recordBoot sets the entries of keys in n's boot record to its boot ID, leaving every other
// entry as it was and where it was. It does nothing while the Node reports no boot ID, and leaves
// a record alone that is, or would become, beyond startuptaint's bounds: the admission policy
// neither reads nor lets the agent change one.
func recordBoot(n *corev1.Node, keys []string) {
	if record, ok := bootRecordWith(n, keys); ok {
		if n.Annotations == nil {
			n.Annotations = map[string]string{}
		}
		n.Annotations[startuptaint.BootAnnotation] = record
	}
}

// bootRecordWith returns n's boot record with the entries of keys set to its boot ID, and whether
// the agent may write it: the Node reports a boot ID, and the record is, and stays, within
// startuptaint's bounds.
func bootRecordWith(n *corev1.Node, keys []string) (string, bool) {
	boot := startuptaint.BootID(n)
	if v, ok := n.Annotations[startuptaint.BootAnnotation]; boot == "" || ok && !startuptaint.BootRecordReadable(v) {
		return "", false
	}
	entries := startuptaint.BootRecord(n)
	for _, key := range keys {
		found := false
		for i, e := range entries {
			if k, _, ok := startuptaint.BootEntry(e); ok && k == key {
				entries[i], found = key+"="+boot, true
			}
		}
		if !found {
			entries = append(entries, key+"="+boot)
		}
	}
	record := strings.Join(entries, ",")
	return record, startuptaint.BootRecordReadable(record)
}

// The gates' verdict as a Node condition (ConditionType): visible in `kubectl describe node`, and
// readable by controllers that act on Node conditions.

// ConditionReasonGatesPass is the condition's reason while every gate passes. While one does not,
// the reason names that gate (gates.ConditionReason): CSINotReady, CSINodeNotReady, HTTPNotReady,
// ContainerNotReady, FileNotReady, ResourceNotReady, ResourceSliceNotReady, NodeConditionNotReady,
// PodNotReady, DaemonSetsNotReady, PluginsNotReady, RegistrationNotReady.
const ConditionReasonGatesPass = "GatesPass"

// publishCondition writes the group's verdict as its ConditionType condition when it differs from
// the condition on the Node and from the one this process wrote last, and returns what it wrote
// and the error to retry with. Nothing is written before the gates have been probed, so a
// restarted agent does not report False for a moment.
func (r *NodeReconciler) publishCondition(ctx context.Context, node *corev1.Node, f *facts) (published, error) {
	g, notReady := f.g, f.v.notReady
	if g.ConditionType == "" || r.DryRun || notReady != nil && notReady.reason == gates.ReasonNotProbed {
		return published{}, nil
	}
	want := condition(g.ConditionType, notReady, f.keptAway)
	current := gates.FindCondition(node.Status.Conditions, want.Type)
	if sameCondition(current, &want) || g.state.conditionWritten(&want) {
		return published{}, nil
	}
	want = stamped(want, current, f.now)
	err := writeCondition(ctx, r.wired.client, node, want)
	if apierrors.IsNotFound(err) {
		return published{}, nil // the Node was deleted meanwhile
	}
	if err != nil {
		return published{condition: &want, conditionErr: err}, fmt.Errorf("writing condition %s of node %s: %w", want.Type, node.Name, err)
	}
	g.state.recordCondition(&want)
	return published{condition: &want}, nil
}

// condition is the verdict as a condition of type t, without its times; with the pods the startup
// taints keep away, when there are any.
func condition(t string, notReady *gateError, keptAway untolerated) corev1.NodeCondition {
	c := corev1.NodeCondition{Type: corev1.NodeConditionType(t)}
	if notReady == nil {
		c.Status, c.Reason, c.Message = corev1.ConditionTrue, ConditionReasonGatesPass, "Every readiness gate passes"
		return c
	}
	// The message names the reason class, not the error's detail, so a detail that changes at
	// every probe does not cause a write.
	c.Status, c.Reason = corev1.ConditionFalse, notReady.title
	msg := fmt.Sprintf("The %s gate does not pass: %s", notReady.gate, strings.ReplaceAll(notReady.reason, "_", " "))
	if keptAway.total > 0 {
		msg += ". " + keptAway.note()
	}
	c.Message = elide(msg, maxConditionMessage)
	return c
}

// stamped is want as written at now over current, the Node's condition of its type (nil when
// there is none): the transition time moves only with the status.
func stamped(want corev1.NodeCondition, current *corev1.NodeCondition, now time.Time) corev1.NodeCondition {
	want.LastHeartbeatTime, want.LastTransitionTime = metav1.NewTime(now), metav1.NewTime(now)
	if current != nil && current.Status == want.Status {
		want.LastTransitionTime = current.LastTransitionTime
	}
	return want
}

// maxConditionMessage is the longest message the admission policy admits in the agent's condition.
const maxConditionMessage = 1024

// sameCondition compares what the verdict decides: the status, reason and message.
func sameCondition(a, b *corev1.NodeCondition) bool {
	return a != nil && b != nil && a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message
}

// maxNote is the longest note the API server accepts in an event, in bytes.
const maxNote = 1024

// elide shortens s to at most n bytes by cutting out its middle, so an API server's refusal,
// which names its policy first and its reason last, fits in an event's note. An admission
// policy's refusal quotes its whole CEL expression, often longer than a note.
func elide(s string, n int) string {
	const cut = " ... "
	if len(s) <= n {
		return s
	}
	if n <= len(cut) {
		return strings.ToValidUTF8(s[:max(n, 0)], "")
	}
	head := (n - len(cut)) / 3
	tail := n - len(cut) - head
	return strings.ToValidUTF8(s[:head], "") + cut + strings.ToValidUTF8(s[len(s)-tail:], "")
}
