// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestParseConditionRequirement(t *testing.T) {
	for _, tt := range []struct{ in, want, err string }{
		{"NetworkUnavailable=False", "NetworkUnavailable=False", ""},
		{"example.com/GPUHealthy", "example.com/GPUHealthy=True", ""},
		{"example.com/GPUHealthy=Unknown", "example.com/GPUHealthy=Unknown", ""},
		{"", "", "not a condition type"},
		{"network unavailable", "", "not a condition type"},
		{"a/b/c=True", "", "not a condition type"},
		{"NetworkUnavailable=false", "", "True, False or Unknown"},
		{"NetworkUnavailable=", "", "True, False or Unknown"},
	} {
		c, err := ParseConditionRequirement(tt.in)
		switch {
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseConditionRequirement(%q) = %v, %v; want an error with %q", tt.in, c, err, tt.err)
		case tt.err == "" && (err != nil || c.String() != tt.want):
			t.Errorf("ParseConditionRequirement(%q) = %v, %v; want %s", tt.in, c, err, tt.want)
		}
	}
}

func TestTheNodeConditionGateReadsTheNode(t *testing.T) {
	g := NewNodeConditionGate(ConditionRequirement{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse})
	for _, tt := range []struct {
		name       string
		conditions []corev1.NodeCondition
		reason     string
	}{
		{"not published yet", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}, ReasonNoCondition},
		{"the other status", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, {Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionTrue}}, ReasonConditionStatus},
		{"as required", []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse}, {Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse}}, ""},
	} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: tt.conditions}}
		err := g.Check(context.Background(), Input{Node: node})
		got := ""
		if err != nil {
			got = Reason(err)
		}
		if got != tt.reason {
			t.Errorf("%s: reason %q, want %q (%v)", tt.name, got, tt.reason, err)
		}
	}
}
