// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
)

// What the agent writes on its Node, and what it reads there of kubelet's.

// RemovedAnnotation lists, comma-separated and in order, the startup taints (KEY[:EFFECT]) agents
// have removed from this Node at least once, written in the patch that removes them: an agent that
// starts later knows a taint it finds came back. The admission policy lets it only append its own.
const RemovedAnnotation = "startup-taint-remover.github.io/removed"

// BootAnnotation records, for each startup taint key, the Node's boot ID (status.nodeInfo.bootID)
// when an agent last removed that taint or found its gates passing, as KEY=BOOTID entries,
// comma-separated. The admission policy lets an agent set only its own keys' entries, only to the
// Node's boot ID.
const BootAnnotation = "startup-taint-remover.github.io/boot"

// FieldManager names the agent's writes in a Node's managedFields, so an operator can tell them
// from other writers'.
const FieldManager = "startup-taint-remover"

// ConfinementProbeLabel is the label the confinement check asks, in a dry run, to set on its own
// Node, and in conditions-only mode the condition type it asks to write: a change the admission
// policy must refuse.
const ConfinementProbeLabel = "startup-taint-remover.github.io/confinement-check"

// NodeShuttingDownMessage is what kubelet's Ready condition says while it shuts the node down.
const NodeShuttingDownMessage = "node is shutting down"

// RemovedRecord reads RemovedAnnotation: the startup taints agents have removed, nil when none.
func RemovedRecord(node *corev1.Node) []string {
	v := node.Annotations[RemovedAnnotation]
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

// MaxBootRecordLength and MaxBootRecordEntries bound the boot record that agents and the admission
// policy read: any Node writer can store anything in BootAnnotation, and the policy pairs entries,
// so a bound on both keeps its cost bounded. A record beyond them is neither read nor changed.
const (
	MaxBootRecordLength  = 4096
	MaxBootRecordEntries = 64
)

// MaxManagedFieldsEntries bounds the ownership records (managedFields) the admission policy reads
// on a Node the agent writes: it pairs each entry with its old version by name, at a cost that grows
// with the square of the entries, so it refuses the agent's writes to a Node with more than this
// many (RefusalManagedBound). The API server keeps at most 10 Update entries; the others are one
// per server-side apply manager.
const MaxManagedFieldsEntries = 128

// BootRecordReadable reports whether v, a value of BootAnnotation, is within MaxBootRecordLength
// characters (as CEL counts them: code points) and MaxBootRecordEntries entries.
func BootRecordReadable(v string) bool {
	return utf8.RuneCountInString(v) <= MaxBootRecordLength && strings.Count(v, ",") < MaxBootRecordEntries
}

// BootRecord returns BootAnnotation's entries as written; nil when the Node has none, an empty one
// (`kubectl annotate node N startup-taint-remover.github.io/boot=`, where `boot-` was meant), or one
// beyond the bounds (see BootRecordReadable). The admission policy reads an empty record as no
// entries too: an agent that read it as one empty entry would keep it in its write, and be refused.
func BootRecord(n *corev1.Node) []string {
	v := n.Annotations[BootAnnotation]
	if v == "" || !BootRecordReadable(v) {
		return nil
	}
	return strings.Split(v, ",")
}

// BootEntry splits an entry of the boot record as the admission policy does: KEY=BOOTID, or no
// entry of a key.
func BootEntry(e string) (key, boot string, ok bool) {
	parts := strings.Split(e, "=")
	if len(parts) != 2 {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// RecordedBoot returns the boot ID the boot record holds for key, and whether it holds one.
func RecordedBoot(n *corev1.Node, key string) (string, bool) {
	for _, e := range BootRecord(n) {
		if k, boot, ok := BootEntry(e); ok && k == key {
			return boot, true
		}
	}
	return "", false
}

// BootID is the Node's boot ID (status.nodeInfo.bootID) as the boot record can hold it: empty when
// kubelet reports none, or one with a "," or "=", which would split the record's entries. An agent
// neither records nor reads a boot it cannot hold, as on a Node that reports no boot ID.
func BootID(n *corev1.Node) string {
	boot := n.Status.NodeInfo.BootID
	if strings.ContainsAny(boot, ",=") {
		return ""
	}
	return boot
}
