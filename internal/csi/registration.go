// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"context"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// PluginInfo is what a plugin's registration server in kubelet's plugins registry tells kubelet
// (k8s.io/kubelet/pkg/apis/pluginregistration/v1 PluginInfo): its type (CSIPlugin, DRAPlugin,
// DevicePlugin), its name (a CSI driver's, a DRA driver's, a device plugin's resource) and the
// endpoint kubelet then dials, a path on the host.
type PluginInfo struct {
	Type, Name, Endpoint string
}

// GetInfo asks the registration server on the client's socket what it registers, as kubelet's
// plugin watcher does.
func (c *IdentityClient) GetInfo(ctx context.Context) (PluginInfo, error) {
	msg, err := c.call(ctx, "/pluginregistration.Registration/GetInfo")
	if err != nil {
		return PluginInfo{}, err
	}
	return pluginInfo(msg)
}

func pluginInfo(msg []byte) (PluginInfo, error) {
	var info PluginInfo
	err := protoFields(msg, func(num protowire.Number, typ protowire.Type, value []byte) {
		if typ != protowire.BytesType {
			return
		}
		switch num {
		case 1:
			info.Type = string(value)
		case 2:
			info.Name = string(value)
		case 3:
			// node-driver-registrar passes --kubelet-registration-path on as it is given.
			info.Endpoint = strings.TrimPrefix(string(value), "unix://")
		}
	})
	return info, err
}
