// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEachTaintsStateFollowsTheRecordAndTheEvents(t *testing.T) {
	created := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	added := metav1.NewTime(created.Add(time.Minute))
	in := install{name: "role", specs: []startuptaint.TaintSpec{{Key: "a", Effect: corev1.TaintEffectNoExecute}, {Key: "a", Effect: corev1.TaintEffectNoSchedule}},
		retaint: map[startuptaint.TaintSpec]bool{{Key: "a", Effect: corev1.TaintEffectNoSchedule}: true}}
	event := func(reason, msg string) corev1.Event {
		return corev1.Event{Reason: reason, Message: msg, EventTime: metav1.NewMicroTime(created.Add(2 * time.Minute))}
	}
	for _, tc := range []struct {
		name   string
		taints []corev1.Taint
		record string
		events nodeEvents
		want   []string // TAINT STATE
	}{
		{name: "held since the Node's creation", taints: []corev1.Taint{{Key: "a", Effect: "NoExecute"}}, want: []string{"a:NoExecute held"}},
		{name: "held since its timeAdded", taints: []corev1.Taint{{Key: "a", Effect: "NoExecute", TimeAdded: &added}}, want: []string{"a:NoExecute held"}},
		{name: "held again", taints: []corev1.Taint{{Key: "a", Effect: "NoExecute"}}, record: "a:NoExecute", want: []string{"a:NoExecute held again"}},
		{name: "put back by continuous mode", taints: []corev1.Taint{{Key: "a", Effect: "NoSchedule"}}, record: "a:NoExecute",
			events: nodeEvents{startuptaint.EventReasonTaintAddedBack: event(startuptaint.EventReasonTaintAddedBack, "Put startup taint a:NoSchedule back: csi gate: not ready for 2m0s")},
			want:   []string{"a:NoExecute removed", "a:NoSchedule put back"}},
		{name: "put back after a reboot", taints: []corev1.Taint{{Key: "a", Effect: "NoSchedule"}}, record: "a:NoExecute",
			events: nodeEvents{startuptaint.EventReasonTaintAddedBack: withAction(event(startuptaint.EventReasonTaintAddedBack,
				"Put startup taint a:NoSchedule back: the node rebooted (boot b): csi gate: not ready"), startuptaint.PutBackOf(startuptaint.CauseReboot).Action)},
			want: []string{"a:NoExecute removed", "a:NoSchedule put back: rebooted"}},
		{name: "put back as the node shut down", taints: []corev1.Taint{{Key: "a", Effect: "NoSchedule"}}, record: "a:NoExecute",
			events: nodeEvents{startuptaint.EventReasonTaintAddedBack: withAction(event(startuptaint.EventReasonTaintAddedBack,
				"Put startup taint a:NoSchedule back: the node is shutting down"), startuptaint.PutBackOf(startuptaint.CauseShutdown).Action)},
			want: []string{"a:NoExecute removed", "a:NoSchedule put back: shut down"}},
		{name: "put back as the node was cordoned", taints: []corev1.Taint{{Key: "a", Effect: "NoSchedule"}}, record: "a:NoExecute",
			events: nodeEvents{startuptaint.EventReasonTaintAddedBack: withAction(event(startuptaint.EventReasonTaintAddedBack,
				"Put startup taint a:NoSchedule back: the node is cordoned"), startuptaint.PutBackOf(startuptaint.CauseCordon).Action)},
			want: []string{"a:NoExecute removed", "a:NoSchedule put back: cordoned"}},
		{name: "someone else's NoSchedule taint of the key, never removed by an agent", taints: []corev1.Taint{{Key: "a", Effect: "NoSchedule"}}},
		{name: "removed", record: "a:NoExecute", events: nodeEvents{startuptaint.EventReasonTaintRemoved: event(startuptaint.EventReasonTaintRemoved, "Removed")},
			want: []string{"a:NoExecute removed"}},
		{name: "forced", record: "a:NoExecute", events: nodeEvents{startuptaint.EventReasonTaintRemovedUnready: event(startuptaint.EventReasonTaintRemovedUnready, "after the maximum wait")},
			want: []string{"a:NoExecute forced"}},
		{name: "removed long ago: its events expired", record: "a:NoExecute", want: []string{"a:NoExecute removed"}},
		{name: "a startup taint no install serves", taints: []corev1.Taint{{Key: "other.csi.example.com/agent-not-ready", Effect: "NoExecute"},
			{Key: "example.com/dedicated", Effect: "NoSchedule"}}, want: []string{"other.csi.example.com/agent-not-ready:NoExecute no install"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", CreationTimestamp: metav1.NewTime(created)}, Spec: corev1.NodeSpec{Taints: tc.taints}}
			if tc.record != "" {
				node.Annotations = map[string]string{startuptaint.RemovedAnnotation: tc.record}
			}
			rows := nodeRows(node, []install{in}, tc.events, true)
			got := make([]string, 0, len(rows))
			for _, r := range rows {
				got = append(got, r.Taint+" "+r.State)
				switch {
				case r.State == StateHeld && tc.taints[0].TimeAdded != nil && !r.Since.Equal(added.Time),
					r.State == StateHeld && tc.taints[0].TimeAdded == nil && !r.Since.Equal(created),
					r.State == StatePutBack && r.Gate != "csi", r.State == startuptaint.PutBackOf(startuptaint.CauseReboot).State && r.Gate != "csi",
					r.State == StateHeld && tc.events == nil && r.Detail != noReport:
					t.Errorf("%+v", r)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("rows %q, want %q", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("rows %q, want %q", got, tc.want)
				}
			}
		})
	}
}

// withAction sets the event's action, as the agent's recorder does.
func withAction(e corev1.Event, action string) corev1.Event {
	e.Action = action
	return e
}

// A node held by the node agents' gate shows the gate and, from the agent's last waiting event,
// the DaemonSets that hold it.
func TestAHeldNodeNamesTheDaemonSetsThatHoldIt(t *testing.T) {
	in := install{name: "agents", specs: []startuptaint.TaintSpec{{Key: "startup-taint-remover.github.io/agents-not-ready"}}}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "startup-taint-remover.github.io/agents-not-ready", Effect: "NoSchedule"}}}}
	const note = "Holding startup taints: daemonsets gate: DaemonSets whose pod on this node is not Ready: kube-system/fluent-bit"
	events := nodeEvents{startuptaint.EventReasonWaitingForAgent: {Reason: startuptaint.EventReasonWaitingForAgent, Message: note}}
	rows := nodeRows(node, []install{in}, events, false)
	if len(rows) != 1 || rows[0].State != StateHeld || rows[0].Gate != "daemonsets" || rows[0].Detail != note {
		t.Fatalf("rows %+v, want the daemonsets gate and its note", rows)
	}
}

// Nodes whose agents name the pods the taint keeps away show the note once, with the nodes that
// report it: on a new node pool, every node reports the same pods.
func TestTheListSaysOnceWhichPodsTheTaintKeepsAway(t *testing.T) {
	in := install{name: "cni", specs: []startuptaint.TaintSpec{{Key: "example.com/cni-not-ready"}}}
	const note = "Pending pods kube-system/typha-5f7c9-x2k (Deployment kube-system/typha) cannot run on any node that carries " +
		"the startup taint example.com/cni-not-ready"
	names := []string{"n1", "n2", "n3", "n4", "n5"}
	rows := make([]Row, 0, len(names))
	for _, name := range names {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/cni-not-ready", Effect: "NoSchedule"}}}}
		events := nodeEvents{startuptaint.EventReasonUntoleratedStartupTaint: {Reason: startuptaint.EventReasonUntoleratedStartupTaint, Message: note}}
		if name == "n5" {
			events = nil
		}
		rows = append(rows, nodeRows(node, []install{in}, events, false)...)
	}
	if rows[0].KeptAway != note || rows[4].KeptAway != "" {
		t.Fatalf("rows %+v, want the note on the nodes that reported it", rows)
	}
	var out strings.Builder
	if err := printReport(&out, rows, 5, nil, outputTable, time.Now()); err != nil {
		t.Fatal(err)
	}
	want := "Kept away on 4 node(s) (n1, n2, n3 and 1 more): " + note + "\n"
	if strings.Count(out.String(), "Kept away") != 1 || !strings.Contains(out.String(), want) {
		t.Errorf("printed\n%s\nwant the line %q once", out.String(), want)
	}
}
