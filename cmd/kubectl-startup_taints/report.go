// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
)

// States of a startup taint on a Node.
const (
	// StateHeld: on the Node, never removed from it.
	StateHeld = "held"
	// StateHeldAgain: on the Node again after an agent removed it once.
	StateHeldAgain = "held again"
	// StatePutBack: put back by an agent, for a cause its last TaintAddedBack event does not
	// name; where it does, the state is the cause's (startuptaint.PutBacks: "put back: rebooted").
	StatePutBack = "put back"
	// StateRemoved: removed once every gate passed.
	StateRemoved = "removed"
	// StateForced: removed by --max-wait while a gate did not pass.
	StateForced = "forced"
	// StateNoInstall: a taint that looks like a startup taint (conventionalStartupKey) and that no
	// install serves: nothing will remove it.
	StateNoInstall = "no install"
)

// noReport is a held taint's detail when no agent has said anything about its Node: no condition
// and no event, so its agent may never have run there.
const noReport = "no agent has reported on this node"

// conventionalStartupKey reports whether key is named as startup taints are by convention: a
// driver's <name>/agent-not-ready (the agent's default), Cluster Autoscaler's startup-taint prefix
// and readiness.k8s.io/. The StartupTaintWithoutAgent alert matches the same keys.
func conventionalStartupKey(key string) bool {
	return strings.HasSuffix(key, "/agent-not-ready") || strings.HasPrefix(key, "startup-taint.cluster-autoscaler.kubernetes.io/") ||
		strings.HasPrefix(key, "readiness.k8s.io/")
}

// Row is one startup taint of one Node.
type Row struct {
	Node  string `json:"node"`
	Taint string `json:"taint"`
	State string `json:"state"`
	// Since is when a held taint was put on (its timeAdded, the Node's creation, or the event
	// that put it back), or when a removed one went; nil when no record of it is left (events
	// expire after an hour).
	Since *time.Time `json:"since,omitempty"`
	// Gate holds the taint: from the agent's Node condition, or its last WaitingForDriver event.
	Gate string `json:"gate,omitempty"`
	// Detail is the condition's message or the event's note.
	Detail string `json:"detail,omitempty"`
	// Install is the ClusterRole of the install whose taint it is.
	Install string `json:"install"`
	// KeptAway names the pending pods the agent found that the held taint keeps away, and the fix:
	// its last UntoleratedStartupTaint event's note.
	KeptAway string `json:"keptAway,omitempty"`
}

// options are what the command line asks for.
type options struct {
	all      bool
	selector string
	chunk    int64
}

// nodeEvents are the agents' latest events on one Node, by reason.
type nodeEvents map[string]corev1.Event

// gather reads the Nodes, a page at a time, and the agents' events, and returns a row per
// startup taint: held ones, and with all, removed ones too. It also returns how many Nodes it read.
func gather(ctx context.Context, c kubernetes.Interface, installs []install, o options) ([]Row, int, error) {
	events, err := agentEvents(ctx, c, o.chunk)
	if err != nil {
		return nil, 0, err
	}
	var rows []Row
	nodes := 0
	opts := metav1.ListOptions{LabelSelector: o.selector, Limit: o.chunk}
	for {
		list, err := c.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return nil, 0, fmt.Errorf("listing Nodes: %w", err)
		}
		for i := range list.Items {
			rows = append(rows, nodeRows(&list.Items[i], installs, events[list.Items[i].Name], o.all)...)
		}
		nodes += len(list.Items)
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	return rows, nodes, nil
}

// agentEvents lists the events the agents recorded (in "default", as events about Nodes are), a
// page at a time, and keeps the latest of each reason for each Node.
func agentEvents(ctx context.Context, c kubernetes.Interface, chunk int64) (map[string]nodeEvents, error) {
	out := map[string]nodeEvents{}
	opts := metav1.ListOptions{FieldSelector: "reportingComponent=" + startuptaint.EventSource, Limit: chunk}
	for {
		list, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("listing the agents' events: %w", err)
		}
		for _, e := range list.Items {
			if e.InvolvedObject.Kind != "Node" {
				continue
			}
			byReason := out[e.InvolvedObject.Name]
			if byReason == nil {
				byReason = nodeEvents{}
				out[e.InvolvedObject.Name] = byReason
			}
			if last, ok := byReason[e.Reason]; !ok || eventTime(e).After(eventTime(last)) {
				byReason[e.Reason] = e
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	return out, nil
}

// eventTime is when an event last happened.
func eventTime(e corev1.Event) time.Time {
	for _, t := range []time.Time{e.EventTime.Time, e.LastTimestamp.Time, e.FirstTimestamp.Time} {
		if !t.IsZero() {
			if e.Series != nil && e.Series.LastObservedTime.After(t) {
				return e.Series.LastObservedTime.Time
			}
			return t
		}
	}
	return e.CreationTimestamp.Time
}

// nodeRows are the rows of one Node.
func nodeRows(node *corev1.Node, installs []install, events nodeEvents, all bool) []Row {
	removed := startuptaint.RemovedRecord(node)
	gate, detail := holdingGate(node, events)
	if gate == "" && detail == "" && len(events) == 0 {
		detail = noReport
	}
	var rows []Row
	served := func(t corev1.Taint) bool {
		for _, in := range installs {
			if len(startuptaint.MatchingTaints([]corev1.Taint{t}, in.specs)) > 0 {
				return true
			}
		}
		return false
	}
	for _, t := range node.Spec.Taints {
		if conventionalStartupKey(t.Key) && !served(t) {
			rows = append(rows, Row{Node: node.Name, Taint: t.ToString(), State: StateNoInstall,
				Detail: "no install serves this taint", Install: "-"})
		}
	}
	for _, in := range installs {
		for _, spec := range in.specs {
			held := startuptaint.MatchingTaints(node.Spec.Taints, []startuptaint.TaintSpec{spec})
			if in.retaint[spec] && node.Annotations[startuptaint.RemovedAnnotation] == "" {
				// Continuous mode puts a taint back only after a removal; this one is someone else's.
				continue
			}
			for _, t := range held {
				r := Row{Node: node.Name, Taint: t.ToString(), State: StateHeld, Gate: gate, Detail: detail, Install: in.name}
				if e, ok := events[startuptaint.EventReasonUntoleratedStartupTaint]; ok {
					r.KeptAway = e.Message
				}
				put, putBack := events[startuptaint.EventReasonTaintAddedBack]
				switch {
				case in.retaint[spec] || putBack && slices.Contains(removed, spec.String()):
					r.State = StatePutBack
					if putBack {
						if row, ok := startuptaint.PutBackByAction(put.Action); ok {
							r.State = row.State
						}
						r.Since, r.Detail = timePtr(eventTime(put)), put.Message
						if m := anyGate.FindStringSubmatch(put.Message); m != nil {
							r.Gate = m[1]
						}
					}
				case slices.Contains(removed, spec.String()):
					r.State = StateHeldAgain
				case t.TimeAdded != nil:
					r.Since = timePtr(t.TimeAdded.Time)
				default:
					r.Since = timePtr(node.CreationTimestamp.Time)
				}
				rows = append(rows, r)
			}
			if all && len(held) == 0 && slices.Contains(removed, spec.String()) {
				rows = append(rows, removedRow(node.Name, spec, in.name, events))
			}
		}
	}
	return rows
}

// removedRow is a removed taint's row, timed by the agent's last event about its removal.
func removedRow(node string, spec startuptaint.TaintSpec, install string, events nodeEvents) Row {
	r := Row{Node: node, Taint: spec.String(), State: StateRemoved, Install: install}
	var last *corev1.Event
	removals := []string{startuptaint.EventReasonTaintRemoved, startuptaint.EventReasonTaintRemovedAgain,
		startuptaint.EventReasonTaintRemovedUnready}
	for _, reason := range removals {
		if e, ok := events[reason]; ok && (last == nil || eventTime(e).After(eventTime(*last))) {
			last = &e
		}
	}
	if last != nil {
		r.Since, r.Detail = timePtr(eventTime(*last)), last.Message
		if last.Reason == startuptaint.EventReasonTaintRemovedUnready {
			r.State = StateForced
		}
	}
	return r
}

// conditionGate reads the gate's name from the agent's condition message ("The csi gate does
// not pass: ...") or event note ("Holding startup taints: csi gate: ...").
var conditionGate = regexp.MustCompile(`^The (\S+) gate does not pass`)
var eventGate = regexp.MustCompile(`^Holding startup taints: (\S+) gate`)

// anyGate finds the gate a TaintAddedBack event names ("Put startup taint ... back: csi gate: ...").
var anyGate = regexp.MustCompile(`: (\S+) gate( of group \S+)?: `)

// holdingGate is the gate that holds a Node's taints, and why: from a False condition the agent
// wrote (it owns the condition in managedFields), else from its last waiting event (WaitingForDriver,
// WaitingForAgent).
func holdingGate(node *corev1.Node, events nodeEvents) (gate, detail string) {
	owned := agentConditions(node)
	for _, c := range node.Status.Conditions {
		if c.Status == corev1.ConditionFalse && slices.Contains(owned, string(c.Type)) {
			if m := conditionGate.FindStringSubmatch(c.Message); m != nil {
				return m[1], c.Reason + ": " + c.Message
			}
			return c.Reason, c.Message
		}
	}
	var last *corev1.Event
	for _, reason := range []string{startuptaint.EventReasonWaitingForDriver, startuptaint.EventReasonWaitingForAgent} {
		if e, ok := events[reason]; ok && (last == nil || eventTime(e).After(eventTime(*last))) {
			last = &e
		}
	}
	if last == nil {
		return "", ""
	}
	if m := eventGate.FindStringSubmatch(last.Message); m != nil {
		return m[1], last.Message
	}
	return "", last.Message
}

// agentConditions are the condition types the agent wrote in the Node's status, as its
// managedFields entry records them.
func agentConditions(node *corev1.Node) []string {
	var out []string
	for _, m := range node.ManagedFields {
		if m.Manager != startuptaint.FieldManager || m.FieldsV1 == nil {
			continue
		}
		var fields struct {
			Status struct {
				Conditions map[string]json.RawMessage `json:"f:conditions"`
			} `json:"f:status"`
		}
		if json.Unmarshal(m.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		for k := range fields.Status.Conditions {
			var key struct{ Type string }
			if after, ok := strings.CutPrefix(k, "k:"); ok && json.Unmarshal([]byte(after), &key) == nil {
				out = append(out, key.Type)
			}
		}
	}
	return out
}

func timePtr(t time.Time) *time.Time { return &t }
