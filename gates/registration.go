// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package gates

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/utils/clock"
)

// RegistrationName names the registration gate in logs, events and metrics.
const RegistrationName = "registration"

// The reason classes of the registration gate: a registrar's socket left by the boot before,
// which nothing serves, and a registrar of this boot that kubelet may not have registered yet.
const (
	ReasonStaleRegistrar = "stale_registrar"
	ReasonRegistering    = "registering"
)

// KubeletRegistrationBound is the longest kubelet takes to register a driver once its registrar
// serves: a registration still trying the boot before's socket dials it for up to 10 s
// (pkg/kubelet/pluginmanager/operationexecutor, dialTimeoutDuration) and finds the new one; one
// that gave up waits out its backoff, at most 2m2s (pkg/util/goroutinemap/exponentialbackoff),
// then the plugin manager's next 1-second loop and GetInfo's second.
const KubeletRegistrationBound = 10*time.Second + 2*time.Minute + 2*time.Second + 2*time.Second

// Reregistration is implemented by CSINodeGate: whether kubelet has added the driver's entry to
// CSINode since this process began to watch it.
type Reregistration interface {
	RegisteredAgain() bool
}

// RegistrationGate tells whether kubelet has registered a CSI driver in this boot. After a reboot
// without kubelet's graceful shutdown, CSINode still lists the driver, and kubelet rewrites
// nothing when its registrar registers it again with an entry that has not changed
// (pkg/volume/csi/nodeinfomanager), so the CSINode gate passes before kubelet knows the driver.
// Kubelet registers a CSI driver only through its registrar's socket in the plugins registry,
// which node-driver-registrar names DRIVER-reg.sock, and a crash leaves that file behind.
//
// The gate fails while that socket is the boot before's, which refuses connections. Once the
// registrar of this boot serves it, the gate passes when kubelet has added the driver's entry to
// CSINode since this process started (Reregistration): a registration that kept retrying the old
// socket reaches the new one, and kubelet undoes and redoes it, which takes the entry out and
// back; after a graceful shutdown kubelet writes back the entry it took out. Otherwise, as kubelet
// writes nothing for an unchanged entry, it passes once the socket is KubeletRegistrationBound
// old. Where there is no such socket (a graceful stop removed
// it, and kubelet took the driver out of CSINode; or the registrar names it otherwise) it passes,
// and the CSINode gate decides. The reconciler heeds it only after a reboot (AfterReboot).
type RegistrationGate struct {
	dir     string
	driver  DriverNamer
	csiNode Reregistration
	clock   clock.PassiveClock
	timeout time.Duration
}

// NewRegistrationGate returns a gate on the registrar of the driver that driver names (a CSIGate),
// whose socket is in dir, kubelet's plugins registry; csiNode is the driver's CSINode gate, and
// clk tells the socket's age.
func NewRegistrationGate(dir string, driver DriverNamer, csiNode Reregistration, clk clock.PassiveClock,
	timeout time.Duration) *RegistrationGate {
	return &RegistrationGate{dir: dir, driver: driver, csiNode: csiNode, clock: clk, timeout: timeout}
}

// Name implements Gate.
func (g *RegistrationGate) Name() string { return RegistrationName }

// Timeout implements Probed.
func (g *RegistrationGate) Timeout() time.Duration { return g.timeout }

// OnlyAfterReboot implements AfterReboot.
func (g *RegistrationGate) OnlyAfterReboot() {}

// Check implements Gate.
func (g *RegistrationGate) Check(ctx context.Context, _ Input) error {
	driver := g.driver.DriverName()
	if driver == "" {
		return NotReady(ReasonNotProbed, errors.New("the CSI driver has not told its name yet"))
	}
	path := filepath.Join(g.dir, driver+"-reg.sock")
	info, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("registrar's socket: %w", err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return NotReady(ReasonStaleRegistrar, fmt.Errorf("the registrar's socket %s serves nothing, as the boot before left it: %w", path, err))
	}
	_ = conn.Close()
	if g.csiNode.RegisteredAgain() {
		return nil
	}
	// A socket's modification time is when its registrar bound it.
	if age := g.clock.Since(info.ModTime()); age < KubeletRegistrationBound {
		return NotReady(ReasonRegistering, fmt.Errorf("the registrar's socket %s has served for %s, and kubelet has not written the driver "+
			"into CSINode since this agent started; it must have registered the driver %s after the socket appeared",
			path, age.Round(time.Millisecond), KubeletRegistrationBound))
	}
	return nil
}
