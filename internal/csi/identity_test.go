// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestTheCSIAnswersAreDecodedAsTheSpecSays(t *testing.T) {
	boolValue := func(v uint64) []byte {
		inner := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), v)
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), inner)
	}
	unknownField := protowire.AppendVarint(protowire.AppendTag(nil, 7, protowire.VarintType), 3)
	for _, tt := range []struct {
		name string
		msg  []byte
		want string // "unset", "true", "false" or "error"
	}{
		{"ready unset", nil, "unset"},
		{"ready true", boolValue(1), "true"},
		{"ready false", boolValue(0), "false"},
		{"ready as an empty BoolValue", protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), nil), "false"},
		{"a field from a later spec", append(unknownField, boolValue(1)...), "true"},
		{"truncated", boolValue(1)[:2], "error"},
	} {
		ready, err := readiness(tt.msg)
		got := "unset"
		switch {
		case err != nil:
			got = "error"
		case ready != nil:
			got = strconv.FormatBool(*ready)
		}
		if got != tt.want {
			t.Errorf("%s: ready %s, want %s", tt.name, got, tt.want)
		}
	}
	info := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "ebs.csi.aws.com")
	info = protowire.AppendString(protowire.AppendTag(info, 2, protowire.BytesType), "v1.2.3")
	if name, err := pluginName(info); err != nil || name != "ebs.csi.aws.com" {
		t.Errorf("pluginName = %q, %v", name, err)
	}
	if _, err := pluginName([]byte{0x0a, 0x10, 'x'}); err == nil {
		t.Error("a name longer than its message decoded")
	}
}

func TestTheRegistrationAnswerIsDecodedAsKubeletReadsIt(t *testing.T) {
	msg := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "CSIPlugin")
	msg = protowire.AppendString(protowire.AppendTag(msg, 2, protowire.BytesType), "ebs.csi.aws.com")
	msg = protowire.AppendString(protowire.AppendTag(msg, 3, protowire.BytesType), "unix:///var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock")
	msg = protowire.AppendString(protowire.AppendTag(msg, 4, protowire.BytesType), "1.0.0")
	info, err := pluginInfo(msg)
	want := PluginInfo{Type: "CSIPlugin", Name: "ebs.csi.aws.com", Endpoint: "/var/lib/kubelet/plugins/ebs.csi.aws.com/csi.sock"}
	if err != nil || info != want {
		t.Errorf("pluginInfo = %+v, %v; want %+v", info, err, want)
	}
	if _, err := pluginInfo(msg[:5]); err == nil {
		t.Error("a truncated answer decoded")
	}
}
