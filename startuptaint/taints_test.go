// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

func TestParseTaintSpec(t *testing.T) {
	tests := []struct {
		in      string
		want    TaintSpec
		wantErr string
	}{
		{in: "ebs.csi.aws.com/agent-not-ready", want: TaintSpec{Key: "ebs.csi.aws.com/agent-not-ready"}},
		{in: "example.com/not-ready:NoExecute", want: TaintSpec{Key: "example.com/not-ready", Effect: corev1.TaintEffectNoExecute}},
		{in: "plain-key:NoSchedule", want: TaintSpec{Key: "plain-key", Effect: corev1.TaintEffectNoSchedule}},
		{in: "k:PreferNoSchedule", want: TaintSpec{Key: "k", Effect: corev1.TaintEffectPreferNoSchedule}},
		{in: "", wantErr: "empty taint"},
		{in: ":NoSchedule", wantErr: "not a valid label key"},
		{in: "example.com/x:NoWay", wantErr: `effect "NoWay" is not one of`},
		{in: "example.com/x:", wantErr: `effect "" is not one of`},
		{in: "example.com/x=true:NoSchedule", wantErr: "values are not matched"},
		{in: "Bad Key", wantErr: "not a valid label key"},
		{in: "a/b/c", wantErr: "not a valid label key"},
		{in: "-leading.dash/x", wantErr: "not a valid label key"},
		{in: strings.Repeat("k", 64), wantErr: "not a valid label key"},
		{in: "k:NoSchedule:extra", wantErr: "is not one of"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseTaintSpec(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseTaintSpec(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseTaintSpec(%q) error = %v", tt.in, err)
			}
			if got != tt.want {
				t.Fatalf("ParseTaintSpec(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if again, err := ParseTaintSpec(got.String()); err != nil || again != got {
				t.Fatalf("String() does not round-trip: %q gives %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestMatchingAndWithoutTaints(t *testing.T) {
	noExec := corev1.Taint{Key: "example.com/agent-not-ready", Value: "true", Effect: corev1.TaintEffectNoExecute}
	noSched := corev1.Taint{Key: "example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
	other := corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoExecute}
	prefix := corev1.Taint{Key: "example.com/agent-not-ready-2", Effect: corev1.TaintEffectNoExecute}
	all := []corev1.Taint{noExec, other, noSched, prefix}

	tests := []struct {
		name        string
		specs       []TaintSpec
		wantMatch   []corev1.Taint
		wantWithout []corev1.Taint
	}{
		{name: "key only matches every effect and any value", specs: []TaintSpec{{Key: noExec.Key}},
			wantMatch: []corev1.Taint{noExec, noSched}, wantWithout: []corev1.Taint{other, prefix}},
		{name: "key and effect", specs: []TaintSpec{{Key: noExec.Key, Effect: corev1.TaintEffectNoSchedule}},
			wantMatch: []corev1.Taint{noSched}, wantWithout: []corev1.Taint{noExec, other, prefix}},
		{name: "several specs", specs: []TaintSpec{{Key: other.Key}, {Key: prefix.Key}},
			wantMatch: []corev1.Taint{other, prefix}, wantWithout: []corev1.Taint{noExec, noSched}},
		{name: "no spec", specs: nil, wantMatch: nil, wantWithout: all},
		{name: "no match", specs: []TaintSpec{{Key: "example.com/absent"}}, wantMatch: nil, wantWithout: all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MatchingTaints(all, tt.specs); !testkit.EqualTaints(got, tt.wantMatch) {
				t.Errorf("MatchingTaints = %v, want %v", got, tt.wantMatch)
			}
			got := WithoutTaints(all, tt.specs)
			if !testkit.EqualTaints(got, tt.wantWithout) {
				t.Errorf("WithoutTaints = %v, want %v", got, tt.wantWithout)
			}
			if len(got) > 0 && &got[0] == &all[0] {
				t.Errorf("WithoutTaints returned its input slice")
			}
		})
	}
}

func TestDefaultTaintSpecIsValid(t *testing.T) {
	spec := DefaultTaintSpec("ebs.csi.aws.com")
	if spec.Key != "ebs.csi.aws.com/agent-not-ready" || spec.Effect != "" {
		t.Fatalf("DefaultTaintSpec = %+v", spec)
	}
	if _, err := ParseTaintSpec(spec.String()); err != nil {
		t.Fatalf("default taint does not parse: %v", err)
	}
}
