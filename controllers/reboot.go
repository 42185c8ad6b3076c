// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package controllers

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

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
