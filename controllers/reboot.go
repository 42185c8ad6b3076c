// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/startup-taint-remover/startup-taint-remover/gates"
	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// A rebooted node keeps its Node object, and kubelet's --register-with-taints acts only when the
// Node is created, so the node comes back without its startup taints and takes pods as soon as
// kubelet reports Ready, before its agents are back. The boot record tells the agent, and the
// admission policy, that the node rebooted since the agent last found its gates passing: then
// the taint goes back on at once, until the gates pass again. That comes after kubelet's Ready,
// so pods pending for the node can land first; a node drained for a reboot is cordoned first,
// and the agent puts its taint back then, and holds it while the node is cordoned, so the node
// comes back tainted.

// Why a taint goes back, beside continuous mode's failing gate.
const (
	causeReboot   = "reboot"
	causeShutdown = "shutdown"
	causeCordon   = "cordon"
)

// bootEntries returns startuptaint.BootAnnotation's entries as written, nil when the Node has none.
func bootEntries(n *corev1.Node) []string {
	v, ok := n.Annotations[startuptaint.BootAnnotation]
	if !ok {
		return nil
	}
	return strings.Split(v, ",")
}

// bootEntry splits an entry as the admission policy does: KEY=BOOTID, or no entry of a key.
func bootEntry(e string) (key, boot string, ok bool) {
	parts := strings.Split(e, "=")
	if len(parts) != 2 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// recordedBoot returns the boot ID recorded for key, and whether there is one.
func recordedBoot(n *corev1.Node, key string) (string, bool) {
	for _, e := range bootEntries(n) {
		if k, boot, ok := bootEntry(e); ok && k == key {
			return boot, true
		}
	}
	return "", false
}

// specKeys are the distinct keys of specs, in order.
func specKeys(specs []startuptaint.TaintSpec) []string {
	keys := make([]string, 0, len(specs))
	for _, s := range specs {
		if !slices.Contains(keys, s.Key) {
			keys = append(keys, s.Key)
		}
	}
	return keys
}

// recordBoot sets the entries of keys in n's boot record to its boot ID, leaving every other
// entry as it was and where it was; it does nothing while the Node reports no boot ID.
func recordBoot(n *corev1.Node, keys []string) {
	boot := n.Status.NodeInfo.BootID
	if boot == "" {
		return
	}
	entries := bootEntries(n)
	for _, key := range keys {
		found := false
		for i, e := range entries {
			if k, _, ok := bootEntry(e); ok && k == key {
				entries[i], found = key+"="+boot, true
			}
		}
		if !found {
			entries = append(entries, key+"="+boot)
		}
	}
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	n.Annotations[startuptaint.BootAnnotation] = strings.Join(entries, ",")
}

// rebooted reports whether the Node booted again since key's boot was recorded.
func rebooted(n *corev1.Node, key string) bool {
	boot := n.Status.NodeInfo.BootID
	recorded, ok := recordedBoot(n, key)
	return boot != "" && ok && recorded != boot
}

// bootedAgain reports whether node booted again since the group's gates last passed, by the boot
// record of the taint an agent puts back: then what a reboot leaves stale cannot count
// (gates.AfterReboot).
func (g *group) bootedAgain(node *corev1.Node) bool {
	specs := g.startupSpecs()
	return len(specs) > 0 && rebooted(node, startuptaint.RetaintSpec(specs).Key)
}

// bootBehind reports whether the record should be brought up to this boot for the group's specs:
// an entry of theirs is from another boot, or one is missing while the Node's removed record says
// the taint was removed once (by an agent from before the boot record, or its entry was lost).
func bootBehind(n *corev1.Node, specs []startuptaint.TaintSpec) bool {
	boot := n.Status.NodeInfo.BootID
	if boot == "" {
		return false
	}
	removed := removedSpecs(n)
	for _, key := range specKeys(specs) {
		recorded, ok := recordedBoot(n, key)
		if ok && recorded != boot || !ok && slices.ContainsFunc(removed, func(s string) bool { return strings.Split(s, ":")[0] == key }) {
			return true
		}
	}
	return false
}

// putsBack reports whether the group's taint in the form an agent puts back (startuptaint.RetaintSpec) is the
// agent's to remove: in continuous mode, and on a Node whose boot was recorded for the group,
// where an agent puts it back after a reboot or at a shutdown. Elsewhere a taint of the same key
// in that form is another writer's, unless a spec selects it.
func (r *NodeReconciler) putsBack(g *group, node *corev1.Node) bool {
	specs := g.startupSpecs()
	if len(specs) == 0 {
		return false
	}
	_, recorded := recordedBoot(node, startuptaint.RetaintSpec(specs).Key)
	return r.RetaintAfter > 0 || recorded
}

// planAfterReboot decides, for a group none of whose startup taints is on the Node, whether its
// taint goes back at once: on a cordoned Node whose boot was recorded, or, while a gate does not
// pass (once probed), on a Node that rebooted since. Once the gates pass, the record is brought
// up to this boot, so that a later restart of the agent in the same boot (a rollout) never reads
// as a reboot. It reports whether it decided the group's change.
func (r *NodeReconciler) planAfterReboot(node *corev1.Node, p *plan) bool {
	notReady := p.v.notReady
	switch {
	case node.Spec.Unschedulable && r.putsBack(p.g, node):
		r.putBack(p, causeCordon)
		return true
	case notReady == nil:
		p.recordBoot = !r.DryRun && bootBehind(node, p.specs)
		return false
	case notReady.reason == gates.ReasonNotProbed || !p.g.bootedAgain(node):
		return false
	}
	r.putBack(p, causeReboot)
	return true
}

// holdWhileCordoned reports whether the taints the group holds are only the one an agent puts
// back, on a cordoned Node: held until it is uncordoned, as a drained node is before its reboot.
func (r *NodeReconciler) holdWhileCordoned(node *corev1.Node, p *plan) bool {
	if !node.Spec.Unschedulable || !r.putsBack(p.g, node) {
		return false
	}
	back := startuptaint.RetaintSpec(p.specs)
	for _, t := range p.obs.held {
		if t.Key != back.Key || t.Effect != back.Effect {
			return false
		}
	}
	return true
}
