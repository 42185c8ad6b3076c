// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package fakecsi is a real CSI driver's Identity and Node servers on a Unix socket, whose
// readiness a test controls, and the plugin registration server through which kubelet finds it.
// The envtest suite, the end-to-end tests and `make demo` use it in place of a CSI driver.
package fakecsi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Readiness is what the driver answers to Probe.
type Readiness int

const (
	// Ready answers Probe with ready=true.
	Ready Readiness = iota
	// ReadyUnset answers Probe with the ready field unset, which the CSI spec reads as ready.
	ReadyUnset
	// NotReady answers Probe with ready=false: alive, still initializing.
	NotReady
	// Failing answers Probe with a gRPC error.
	Failing
	// Hung never answers Probe until the caller gives up.
	Hung
)

// Driver is a CSI Identity and Node server. Its zero value is not usable; use Start.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedNodeServer

	name      string
	path      string
	readiness atomic.Int32
	probes    atomic.Int64
	// maxVolumes is what NodeGetInfo reports as max_volumes_per_node (0: no limit).
	maxVolumes atomic.Int64

	mu     sync.Mutex
	server *grpc.Server
	done   chan struct{}
	// published are the volumes kubelet has published through the driver, in order.
	published []Publish
}

// Publish is one NodePublishVolume call the driver answered: kubelet mounting a pod's volume.
type Publish struct {
	VolumeID, TargetPath string
	At                   time.Time
}

// Start serves a driver named name on a new Unix socket at path, initially answering r.
func Start(path, name string, r Readiness) (*Driver, error) {
	d := &Driver{name: name, path: path}
	d.readiness.Store(int32(r))
	if err := d.Restart(); err != nil {
		return nil, err
	}
	return d, nil
}

// Restart serves again on a fresh socket file after Stop, as a restarted driver would.
func (d *Driver) Restart() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.server != nil {
		return errors.New("fakecsi: already serving")
	}
	if err := os.Remove(d.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("fakecsi: removing stale socket: %w", err)
	}
	lis, err := net.Listen("unix", d.path)
	if err != nil {
		return fmt.Errorf("fakecsi: %w", err)
	}
	d.server = grpc.NewServer()
	d.done = make(chan struct{})
	csi.RegisterIdentityServer(d.server, d)
	csi.RegisterNodeServer(d.server, d)
	go func(s *grpc.Server) { _ = s.Serve(lis) }(d.server)
	return nil
}

// Stop stops serving and removes the socket, as a crashed driver's restart would.
func (d *Driver) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.server == nil {
		return
	}
	close(d.done) // release hung probes, or Stop would wait for them
	d.server.Stop()
	d.server = nil
	_ = os.Remove(d.path)
}

// SetReadiness changes what the next Probe answers.
func (d *Driver) SetReadiness(r Readiness) { d.readiness.Store(int32(r)) }

// Probes returns how many Probe calls the driver has received.
func (d *Driver) Probes() int64 { return d.probes.Load() }

// Name is the name the driver reports (GetPluginInfo).
func (d *Driver) Name() string { return d.name }

// Path returns the socket's path.
func (d *Driver) Path() string { return d.path }

// GetPluginInfo implements csi.IdentityServer.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: d.name, VendorVersion: "test"}, nil
}

// GetPluginCapabilities implements csi.IdentityServer.
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	return &csi.GetPluginCapabilitiesResponse{}, nil
}

// Probe implements csi.IdentityServer.
func (d *Driver) Probe(ctx context.Context, _ *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	d.probes.Add(1)
	switch Readiness(d.readiness.Load()) {
	case Ready:
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(true)}, nil
	case ReadyUnset:
		return &csi.ProbeResponse{}, nil
	case NotReady:
		return &csi.ProbeResponse{Ready: wrapperspb.Bool(false)}, nil
	case Failing:
		return nil, status.Error(codes.FailedPrecondition, "fakecsi: driver unhealthy")
	default:
		d.mu.Lock()
		done := d.done
		d.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-done:
			return nil, status.Error(codes.Unavailable, "fakecsi: stopped")
		}
	}
}

// SetMaxVolumes sets what NodeGetInfo reports as max_volumes_per_node, which kubelet publishes as
// the CSINode entry's allocatable.count (0: none).
func (d *Driver) SetMaxVolumes(n int64) { d.maxVolumes.Store(n) }

// NodeGetInfo implements csi.NodeServer: kubelet asks it when it registers the driver.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeGetInfoResponse{NodeId: "fakecsi-" + host, MaxVolumesPerNode: d.maxVolumes.Load()}, nil
}

// NodeGetCapabilities implements csi.NodeServer: the driver needs no staging.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	return &csi.NodeGetCapabilitiesResponse{}, nil
}

// NotServing is NodePublishVolume's error while the driver's Probe would not answer ready: a
// driver still initializing, or unhealthy, cannot serve a volume.
const NotServing = "fakecsi: not ready to serve volumes"

// NodePublishVolume implements csi.NodeServer: it records the call and creates the target
// directory, which is all a test's kubelet, whose mounter is fake, needs. It fails with
// NotServing unless Probe would answer ready.
func (d *Driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeId() == "" || req.GetTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "fakecsi: volume ID and target path are required")
	}
	if r := Readiness(d.readiness.Load()); r != Ready && r != ReadyUnset {
		return nil, status.Error(codes.Unavailable, NotServing)
	}
	if err := os.MkdirAll(req.GetTargetPath(), 0o750); err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.published = append(d.published, Publish{VolumeID: req.GetVolumeId(), TargetPath: req.GetTargetPath(), At: time.Now()})
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume implements csi.NodeServer.
func (d *Driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if err := os.Remove(req.GetTargetPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// Published returns the volumes published so far, in order.
func (d *Driver) Published() []Publish {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Publish(nil), d.published...)
}
