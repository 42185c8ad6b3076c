package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/hollowkubelet"
)

// notRegistered is kubelet's message for a mount of a driver it has not registered yet: the
// failure a startup taint exists to prevent.
const notRegistered = "not found in the list of registered CSI drivers"

// failedMounts counts kubelet's log lines of failed mounts of the test driver's volumes.
type failedMounts struct {
	mu       sync.Mutex
	n        int
	partial  []byte
	examples []string
}

func (f *failedMounts) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.partial = append(f.partial, p...)
	for {
		i := bytes.IndexByte(f.partial, '\n')
		if i < 0 {
			break
		}
		line := string(f.partial[:i])
		f.partial = f.partial[i+1:]
		if strings.Contains(line, "MountVolume.SetUp failed") && strings.Contains(line, driverName) {
			f.n++
			if len(f.examples) < 3 {
				f.examples = append(f.examples, line)
			}
		}
	}
	return len(p), nil
}

func (f *failedMounts) count() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n, append([]string(nil), f.examples...)
}

// startControlPlaneComponent runs kube-scheduler or kube-controller-manager, built beside the
// envtest binaries, against the test API server until the suite ends.
func startControlPlaneComponent(name string, args ...string) {
	GinkgoHelper()
	path := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), name)
	_, err := os.Stat(path)
	Expect(err).NotTo(HaveOccurred(), "run `make envtest`")
	cmd := exec.Command(path, append([]string{"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--secure-port=0"}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_, _ = cmd.Process.Wait()
	})
}

// workloadRun is what one node's start did to the pods that need its driver.
type workloadRun struct {
	failed    int
	examples  []string
	published []fakecsi.Publish
	taintGone time.Time
}

// runWorkload creates pods that need the driver before their node joins, starts the node's
// kubelet (which registers it with the startup taint), the driver, whose registration with
// kubelet comes late as a slow registrar's does, and the agent with agentArgs; and waits until
// kubelet has published every pod's volume through the driver.
func runWorkload(ctx context.Context, node string, agentArgs ...string) workloadRun {
	GinkgoHelper()
	const pods = 3
	deleteNodeAfterSpec(node)
	for i := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", node, i), Namespace: "default"},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{corev1.LabelHostname: node},
				Containers: []corev1.Container{{Name: "app", Image: "example.com/app",
					VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
				Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
					CSI: &corev1.CSIVolumeSource{Driver: driverName}}}},
			},
		}
		Expect(k8sClient.Create(ctx, pod)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(0)))).To(Succeed())
		})
	}
	failures := &failedMounts{}
	kubelet, err := hollowkubelet.Start(hollowkubelet.Options{Kubeconfig: kubeconfig, Node: node,
		RegisterWithTaints: []corev1.Taint{startupTaint}, Log: io.MultiWriter(GinkgoWriter, failures)})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(kubelet.Stop)
	driver, err := fakecsi.Start(filepath.Join(GinkgoT().TempDir(), "csi.sock"), driverName, fakecsi.Ready)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(driver.Stop)
	runBinary(append([]string{"--kubeconfig=" + kubeconfig, "--node-name=" + node, "--csi-address=" + driver.Path(),
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=200ms"}, agentArgs...)...)

	taintGone := make(chan time.Time, 1)
	go func() {
		defer GinkgoRecover()
		Eventually(hasTaint(ctx, k8sClient, node, startupTaint.Key), time.Minute, 10*time.Millisecond).Should(BeFalse())
		taintGone <- time.Now()
	}()
	time.Sleep(4 * time.Second) // the registrar's delay
	register(kubelet, driver)
	Eventually(func() int { return len(driver.Published()) }, 2*time.Minute, 100*time.Millisecond).Should(BeNumerically(">=", pods),
		"kubelet publishes every pod's volume")
	run := workloadRun{published: driver.Published()}
	run.failed, run.examples = failures.count()
	Eventually(taintGone).Should(Receive(&run.taintGone))
	return run
}

var _ = Describe("a workload that needs the driver, with the real scheduler and kubelet", Serial, Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		startControlPlaneComponent("kube-scheduler")
		startControlPlaneComponent("kube-controller-manager", "--controllers=node-lifecycle-controller,taint-eviction-controller",
			"--use-service-account-credentials=false", "--node-monitor-period=1s")
		csiDriver := &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName}, Spec: storagev1.CSIDriverSpec{
			AttachRequired:       ptr.To(false),
			VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral},
		}}
		Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, csiDriver))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, csiDriver))).To(Succeed()) })
	})

	It("lands no pod before its driver is registered: every volume is published, and no mount fails", func(ctx SpecContext) {
		run := runWorkload(ctx, "e2e-workload")
		GinkgoWriter.Printf("defaults: %d failed mounts, %d volumes published, the first %s after the taint went\n",
			run.failed, len(run.published), run.published[0].At.Sub(run.taintGone))
		Expect(run.failed).To(BeZero(), "failed mounts: %v", run.examples)
		for _, p := range run.published {
			Expect(p.At).To(BeTemporally(">", run.taintGone), "volume %s published before the taint went", p.VolumeID)
		}
	})

	It("sees the failure it prevents when the taint goes before kubelet registers the driver", func(ctx SpecContext) {
		run := runWorkload(ctx, "e2e-workload-early", "--require-csinode=false")
		GinkgoWriter.Printf("--require-csinode=false: %d failed mounts, %d volumes published\n", run.failed, len(run.published))
		Expect(run.failed).To(BeNumerically(">", 0))
		Expect(run.examples).To(ContainElement(ContainSubstring(notRegistered)))
	})
})
