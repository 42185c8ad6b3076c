// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package fakecsi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"google.golang.org/grpc"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
)

// Registrar registers a CSI driver with kubelet the way node-driver-registrar does: a
// registration server on a socket in kubelet's plugins_registry directory, which kubelet's plugin
// watcher finds, asks for the driver's name and endpoint, and tells whether registration worked.
// Kubelet then calls the driver's NodeGetInfo and writes the driver into the node's CSINode.
type Registrar struct {
	registerapi.UnimplementedRegistrationServer

	driver string
	socket string // the registration socket
	target string // the driver's own socket, which kubelet dials

	mu     sync.Mutex
	server *grpc.Server
	status []error // what kubelet reported, in order; nil for a success
}

// Register starts registering driver (its socket at target) with the kubelet whose plugins
// registry is registryDir.
func Register(registryDir, driver, target string) (*Registrar, error) {
	r := &Registrar{driver: driver, socket: filepath.Join(registryDir, driver+"-reg.sock"), target: target}
	if err := os.Remove(r.socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("fakecsi: removing stale registration socket: %w", err)
	}
	lis, err := net.Listen("unix", r.socket)
	if err != nil {
		return nil, fmt.Errorf("fakecsi: %w", err)
	}
	r.server = grpc.NewServer()
	registerapi.RegisterRegistrationServer(r.server, r)
	go func(s *grpc.Server) { _ = s.Serve(lis) }(r.server)
	return r, nil
}

// Unregister stops the registration server and removes its socket, as a stopped registrar's pod
// does; kubelet then deregisters the driver.
func (r *Registrar) Unregister() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.server == nil {
		return
	}
	r.server.Stop()
	r.server = nil
	_ = os.Remove(r.socket)
}

// Statuses returns what kubelet reported so far: nil for a registration that worked.
func (r *Registrar) Statuses() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.status...)
}

// GetInfo implements the registration API: a CSI plugin, its name and endpoint.
func (r *Registrar) GetInfo(context.Context, *registerapi.InfoRequest) (*registerapi.PluginInfo, error) {
	return &registerapi.PluginInfo{Type: registerapi.CSIPlugin, Name: r.driver, Endpoint: r.target,
		SupportedVersions: []string{"1.0.0"}}, nil
}

// NotifyRegistrationStatus implements the registration API.
func (r *Registrar) NotifyRegistrationStatus(_ context.Context, s *registerapi.RegistrationStatus) (*registerapi.RegistrationStatusResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var err error
	if !s.PluginRegistered {
		err = errors.New(s.Error)
	}
	r.status = append(r.status, err)
	return &registerapi.RegistrationStatusResponse{}, nil
}

// LeaveStaleRegistration leaves in registryDir the registration socket of driver that its
// registrar had before a crash or a reboot without kubelet's graceful shutdown: the file stays on
// disk, and nothing serves it. The registrar of the next boot removes it as it starts (Register).
func LeaveStaleRegistration(registryDir, driver string) error {
	lis, err := net.Listen("unix", filepath.Join(registryDir, driver+"-reg.sock"))
	if err != nil {
		return fmt.Errorf("fakecsi: %w", err)
	}
	lis.(*net.UnixListener).SetUnlinkOnClose(false)
	return lis.Close()
}
