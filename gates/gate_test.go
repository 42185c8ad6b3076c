// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

func TestEveryGateNamesItsConditionReason(t *testing.T) {
	csi, err := NewCSIGate("/csi/csi.sock", 0)
	if err != nil {
		t.Fatal(err)
	}
	file, err := NewFileGate("/etc/cni/net.d/*.conflist")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		gate Gate
		want string
	}{
		{csi, "CSINotReady"},
		{NewCSINodeGate("n1", csi, false), "CSINodeNotReady"},
		{NewHTTPGate("http://127.0.0.1/healthz", 0), "HTTPNotReady"},
		{NewContainerGate("n1", types.NamespacedName{Namespace: "ns", Name: "p"}, "driver"), "ContainerNotReady"},
		{file, "FileNotReady"},
		{NewResourceGate(), "ResourceNotReady"},
		{NewResourceSliceGate("n1", "gpu.example.com"), "ResourceSliceNotReady"},
		{NewNodeConditionGate(), "NodeConditionNotReady"},
		{NewPodGate("n1"), "PodNotReady"},
		{named("gpu-plugin"), "GpuPluginNotReady"},
		{named("9"), "GateNotReady"},
		{named(""), "GateNotReady"},
	} {
		if got := ConditionReason(tt.gate); got != tt.want {
			t.Errorf("ConditionReason(%s) = %q, want %q", tt.gate.Name(), got, tt.want)
		}
	}
}

func TestReasonReadsTheVerdictThroughWrapping(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("probing: %w", NotReady(ReasonNoFile, errors.New("no file"))), ReasonNoFile},
		{fmt.Errorf("probing: %w", context.DeadlineExceeded), ReasonTimeout},
		{errors.New("anything else"), ReasonError},
	} {
		if got := Reason(tt.err); got != tt.want {
			t.Errorf("Reason(%v) = %q, want %q", tt.err, got, tt.want)
		}
	}
}
