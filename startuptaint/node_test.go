// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package startuptaint

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestTheRecordsReadAsThePolicyReadsThem(t *testing.T) {
	node := func(annotations map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Annotations: annotations}}
	}
	if got := RemovedRecord(node(nil)); got != nil {
		t.Errorf("RemovedRecord of a Node without the record = %q, want nil", got)
	}
	if got := RemovedRecord(node(map[string]string{RemovedAnnotation: "a:NoExecute,b"})); !slices.Equal(got, []string{"a:NoExecute", "b"}) {
		t.Errorf("RemovedRecord = %q, want both entries in order", got)
	}
	// An entry with no "=", or more than one, is no key's entry: the policy splits it the same way.
	n := node(map[string]string{BootAnnotation: "a=boot-1,b,c=boot=2,d=boot-3"})
	for key, want := range map[string]string{"a": "boot-1", "b": "", "c": "", "d": "boot-3", "e": ""} {
		got, ok := RecordedBoot(n, key)
		if got != want || ok != (want != "") {
			t.Errorf("RecordedBoot(%s) = %q, %v, want %q", key, got, ok, want)
		}
	}
	if got := BootRecord(node(map[string]string{})); got != nil {
		t.Errorf("BootRecord of a Node without the record = %q, want nil", got)
	}
	if got := BootRecord(node(map[string]string{BootAnnotation: ""})); got != nil {
		t.Errorf("BootRecord of an empty record = %q, want nil, as the admission policy reads it", got)
	}
	// A record beyond either bound is read as none, as the admission policy reads it.
	own := "a=boot-1"
	for name, tc := range map[string]struct {
		record   string
		readable bool
	}{
		"64 entries":                {strings.Repeat(",", MaxBootRecordEntries-1) + own, true},
		"65 entries":                {strings.Repeat(",", MaxBootRecordEntries) + own, false},
		"4096 characters":           {strings.Repeat("x", MaxBootRecordLength-len(own)-1) + "," + own, true},
		"4097 characters":           {strings.Repeat("x", MaxBootRecordLength-len(own)) + "," + own, false},
		"4096 code points, 8 KB":    {strings.Repeat("é", MaxBootRecordLength-len(own)-1) + "," + own, true},
		"the agent's key, repeated": {strings.Repeat(own+",", 1000) + own, false},
	} {
		_, ok := RecordedBoot(node(map[string]string{BootAnnotation: tc.record}), "a")
		if BootRecordReadable(tc.record) != tc.readable || ok != tc.readable {
			t.Errorf("%s: BootRecordReadable = %v, RecordedBoot found = %v, want %v", name, BootRecordReadable(tc.record), ok, tc.readable)
		}
	}
}

func TestSpecKeysAreDistinctAndInOrder(t *testing.T) {
	specs := []TaintSpec{{Key: "b", Effect: corev1.TaintEffectNoExecute}, {Key: "a"}, {Key: "b", Effect: corev1.TaintEffectNoSchedule}}
	if got := SpecKeys(specs); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("SpecKeys = %q, want [b a]", got)
	}
}
