// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

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
