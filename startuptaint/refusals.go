// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

// PolicyMessagePrefix starts every message of the shipped admission policy, so a refusal by the
// policy can be told from any other.
const PolicyMessagePrefix = "the startup-taint-remover "

// Refusal tags: every rule of the shipped admission policies (config/policy) ends its message with
// one, in brackets, so the agent and the tests tell the rules apart by the tag, never by the prose.
const (
	RefusalSettings       = "settings"
	RefusalUpdateOnly     = "update-only"
	RefusalConditionsOnly = "conditions-only"
	RefusalStatusOff      = "status-off"
	RefusalNodeClaim      = "node-claim"
	RefusalOwnNode        = "own-node"
	RefusalTaints         = "taints"
	RefusalSpec           = "spec"
	RefusalMetadata       = "metadata"
	RefusalRemovedRecord  = "removed-record"
	RefusalBootRecord     = "boot-record"
	RefusalNode           = "node"
	RefusalStatus         = "status"
	RefusalCondition      = "condition"
	RefusalManagedBound   = "managed-fields-bound"
	RefusalManagedEntries = "managed-fields-entries"
	RefusalManagedGained  = "managed-fields-gained"
	RefusalManagedLost    = "managed-fields-lost"
	RefusalEventRegarding = "event-regarding"
	RefusalEventReporter  = "event-reporter"
	RefusalEventMetadata  = "event-metadata"
	RefusalEventUpdate    = "event-update"
)
