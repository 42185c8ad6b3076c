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

// KubeletRegistrationTime bounds how long kubelet takes to list a driver after its registrar's
// socket appears: its plugin watcher hears of the socket at once, its plugin manager reconciles
// every second (pkg/kubelet/pluginmanager, loopSleepDuration) and gives the registrar's GetInfo
// a second (pkg/kubelet/pluginmanager/operationexecutor), and then adds the driver to its list
// (pkg/volume/csi, RegisterPlugin) before it calls the driver.
const KubeletRegistrationTime = 2 * time.Second

// RegistrationGate tells whether kubelet can have registered a CSI driver in this boot. After a
// reboot without kubelet's graceful shutdown, CSINode still lists the driver, and kubelet rewrites
// nothing when its registrar registers it again with an entry that has not changed
// (pkg/volume/csi/nodeinfomanager), so the CSINode gate passes before kubelet knows the driver.
// Kubelet registers a CSI driver only through its registrar's socket in the plugins registry,
// which node-driver-registrar names DRIVER-reg.sock. The gate fails while that socket is the boot
// before's, which refuses connections, and until it has served for KubeletRegistrationTime. Where
// there is no such socket (a graceful stop removed it, and kubelet took the driver out of CSINode;
// or the registrar names it otherwise) it passes, and the CSINode gate decides. The reconciler
// consults it only after a reboot (AfterReboot).
type RegistrationGate struct {
	dir     string
	driver  DriverNamer
	clock   clock.PassiveClock
	timeout time.Duration
}

// NewRegistrationGate returns a gate on the registrar of the driver that driver names (a CSIGate),
// whose socket is in dir, kubelet's plugins registry. clk tells the socket's age.
func NewRegistrationGate(dir string, driver DriverNamer, clk clock.PassiveClock, timeout time.Duration) *RegistrationGate {
	return &RegistrationGate{dir: dir, driver: driver, clock: clk, timeout: timeout}
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
	// A socket's modification time is when its registrar bound it.
	if age := g.clock.Since(info.ModTime()); age < KubeletRegistrationTime {
		return NotReady(ReasonRegistering, fmt.Errorf("the registrar's socket %s appeared %s ago; kubelet lists its driver within %s",
			path, age.Round(time.Millisecond), KubeletRegistrationTime))
	}
	return nil
}
