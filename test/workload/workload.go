// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package workload is what the tests, the benchmark and the demo need to run pods that use a CSI
// driver on a hollow node: the scheduler and the node lifecycle controller that place them (built
// beside the envtest binaries by hack/envtest), the pods with their inline or PVC-backed volumes,
// the CSIDriver object those need, and a count of the mounts kubelet failed.
package workload

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// NotRegistered is kubelet's message for a mount of a driver it has not registered yet: the
// failure a startup taint exists to prevent.
const NotRegistered = "not found in the list of registered CSI drivers"

// RegistrarDelay is how long after its driver a slow node-driver-registrar registers it with
// kubelet, in the tests, the benchmark and the demo: long enough that a pod placed on the node
// when the driver first answers reaches kubelet before the driver does.
const RegistrarDelay = 4 * time.Second

// NotReadyAfterRegistration is how long a driver that registers before it is ready (still
// reaching its cloud's API, or loading a module) answers its Probe not ready, and refuses
// volumes, after its registration, in the tests and the benchmark.
const NotReadyAfterRegistration = 6 * time.Second

// ControlPlane is kube-scheduler and kube-controller-manager running against an API server.
type ControlPlane struct {
	cmds []*exec.Cmd
}

// StartControlPlane runs kube-scheduler, and kube-controller-manager with only the controllers a
// workload on a hollow node needs: node lifecycle, which removes kubelet's not-ready taint once the
// Node is Ready, taint eviction, the PersistentVolume binder, which binds the claims of PVC-backed
// volumes (Claim), and the claims' and volumes' protection, which lets them go once no pod uses
// them, and any further controllers (daemonset-controller). Both use kubeconfig, an admin's, and
// write their logs to log. The controller manager writes as system:kube-controller-manager, the
// identity its controllers have without per-controller credentials, which admission policies
// see (with the admin's grant).
func StartControlPlane(kubeconfig string, log io.Writer, controllers ...string) (*ControlPlane, error) {
	return StartControlPlaneMonitoring(kubeconfig, log, time.Second, controllers...)
}

// StartControlPlaneMonitoring is StartControlPlane with the node lifecycle controller's
// --node-monitor-period (5 s by default in clusters; 1 s makes the tests' reboots quicker).
func StartControlPlaneMonitoring(kubeconfig string, log io.Writer, monitorPeriod time.Duration, controllers ...string) (*ControlPlane, error) {
	asManager, err := impersonatingKubeconfig(kubeconfig, "system:kube-controller-manager")
	if err != nil {
		return nil, err
	}
	cp := &ControlPlane{}
	for _, c := range []struct {
		name, kubeconfig string
		args             []string
	}{
		{name: "kube-scheduler", kubeconfig: kubeconfig},
		{name: "kube-controller-manager", kubeconfig: asManager, args: []string{"--controllers=" + strings.Join(append([]string{"node-lifecycle-controller",
			"taint-eviction-controller", "persistentvolume-binder-controller", "persistentvolumeclaim-protection-controller",
			"persistentvolume-protection-controller"}, controllers...), ","),
			"--use-service-account-credentials=false", "--node-monitor-period=" + monitorPeriod.String()}},
	} {
		path, err := testkit.EnvtestBinary(c.name)
		if err != nil {
			cp.Stop()
			return nil, err
		}
		cmd := exec.Command(path, append([]string{"--kubeconfig=" + c.kubeconfig, "--leader-elect=false", "--secure-port=0"}, c.args...)...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			cp.Stop()
			return nil, fmt.Errorf("starting %s: %w", c.name, err)
		}
		cp.cmds = append(cp.cmds, cmd)
	}
	return cp, nil
}

// impersonatingKubeconfig writes, beside kubeconfig, a copy whose users act as user (kubeconfig's
// as), keeping their groups' grant by system:masters, and returns its path.
func impersonatingKubeconfig(kubeconfig, user string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", kubeconfig, err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Impersonate, auth.ImpersonateGroups = user, []string{"system:masters", "system:authenticated"}
	}
	path := kubeconfig + "." + strings.ReplaceAll(user, ":", "-")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}

// Stop ends both components (SIGTERM, then SIGKILL after 10 s) and waits for them.
func (cp *ControlPlane) Stop() {
	for _, cmd := range cp.cmds {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	cp.cmds = nil
}

// CSIDriver is the CSIDriver object of a driver that serves inline (ephemeral) and PVC-backed
// (persistent) volumes and needs no attach: kubelet refuses an inline volume of a driver without
// one.
func CSIDriver(driver string) *storagev1.CSIDriver {
	return &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driver}, Spec: storagev1.CSIDriverSpec{
		AttachRequired:       ptr.To(false),
		VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecycleEphemeral, storagev1.VolumeLifecyclePersistent},
	}}
}

// SchedulerCheckedCSIDriver is CSIDriver with preventPodSchedulingIfMissing: the scheduler's own
// check (Kubernetes 1.37, KEP-5030) keeps a pod with a PVC-backed volume of driver off a node
// until its CSINode lists the driver.
func SchedulerCheckedCSIDriver(driver string) *storagev1.CSIDriver {
	d := CSIDriver(driver)
	d.Spec.PreventPodSchedulingIfMissing = ptr.To(true)
	return d
}

// PodObjects are what a pod that needs driver and may only run on node is made of: with claim,
// the static CSI PersistentVolume, its claim (Claim) and the pod (ClaimPod); without, the pod
// with an inline volume (Pod). Create them in order.
func PodObjects(namespace, name, node, driver string, claim bool) []client.Object {
	if !claim {
		return []client.Object{Pod(namespace, name, node, driver)}
	}
	pvc, pv := Claim(namespace, name, driver)
	return []client.Object{pv, pvc, ClaimPod(namespace, name, node, pvc.Name)}
}

// Claim is a PersistentVolumeClaim of namespace/name and the static CSI PersistentVolume of driver
// bound to it in advance; the PersistentVolume binder marks both Bound.
func Claim(namespace, name, driver string) (*corev1.PersistentVolumeClaim, *corev1.PersistentVolume) {
	size := corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(""), VolumeName: namespace + "-" + name, Resources: corev1.VolumeResourceRequirements{Requests: size}}}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: namespace + "-" + name},
		Spec: corev1.PersistentVolumeSpec{AccessModes: pvc.Spec.AccessModes, Capacity: size, StorageClassName: "",
			ClaimRef:               &corev1.ObjectReference{Namespace: namespace, Name: name},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: pvc.Name}}}}
	return pvc, pv
}

// ClaimPod is Pod with the volume of the claim of namespace/name (Claim) instead of an inline one.
func ClaimPod(namespace, name, node, claim string, tolerations ...corev1.Toleration) *corev1.Pod {
	pod := Pod(namespace, name, node, "", tolerations...)
	pod.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}
	return pod
}

// Pod is a pod that may only run on node and mounts an inline volume of driver. It tolerates
// no startup taint, so it is scheduled only once the node's taints are gone.
func Pod(namespace, name, node, driver string, tolerations ...corev1.Toleration) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: corev1.PodSpec{
			NodeSelector: map[string]string{corev1.LabelHostname: node},
			Tolerations:  tolerations,
			Containers: []corev1.Container{{Name: "app", Image: "example.com/app",
				VolumeMounts: []corev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
			Volumes: []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{
				CSI: &corev1.CSIVolumeSource{Driver: driver}}}},
		},
	}
}

// PodStates says, for each pod of namespace that may only run on node (Pod), where it is and, if
// it is not scheduled, why: for a failure's message.
func PodStates(ctx context.Context, c client.Reader, namespace, node string) string {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(namespace)); err != nil {
		return err.Error()
	}
	var states []string
	for _, pod := range pods.Items {
		if pod.Spec.NodeSelector[corev1.LabelHostname] != node {
			continue
		}
		state := fmt.Sprintf("%s on %q, %s", pod.Name, pod.Spec.NodeName, pod.Status.Phase)
		for _, cond := range pod.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue {
				state += ": " + cond.Message
			}
		}
		states = append(states, state)
	}
	return strings.Join(states, "; ")
}

// DriverGone is in kubelet's message for a mount through a driver whose socket is gone: a driver
// that died while its registrar kept it registered.
const DriverGone = "connect: no such file or directory"

// reasons are the causes of failed mounts a report names, each by a phrase of kubelet's message.
var reasons = []string{NotRegistered, fakecsi.NotServing, DriverGone}

// failedMount matches kubelet's log line of a failed mount step: MountDevice, where kubelet first
// calls the driver for a PVC-backed CSI volume (to ask whether it stages volumes), and SetUp, its
// publish, the first call for an inline one.
var failedMount = regexp.MustCompile(`MountVolume\.[A-Za-z]+( initialization)? failed`)

// failedPod finds the pod in kubelet's message of a failed mount step
// (pkg/volume/util/operationexecutor: `pod "NAME" (UID: ...)`), its quotes escaped in a
// structured log line.
var failedPod = regexp.MustCompile(`pod \\?"([^"\\]+)\\?" \(UID`)

// MountFailures counts kubelet's log lines of failed mounts of CSI volumes; give it kubelet's log
// (hollowkubelet.Options.Log). The hollow kubelet's events never reach the API server, so its log
// is where a failed mount shows. Each test node runs one CSI driver, so these are its failures:
// kubelet's message names the driver only for some causes.
type MountFailures struct {
	mu       sync.Mutex
	partial  []byte
	examples []string
	// causes holds each failure's phrase from reasons, or "other", in order; pods, the pod it
	// was of ("" when the line does not say).
	causes []string
	pods   []string
}

// NewMountFailures counts the failed mounts of CSI volumes.
func NewMountFailures() *MountFailures { return &MountFailures{} }

// Write implements io.Writer.
func (f *MountFailures) Write(p []byte) (int, error) {
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
		if failedMount.MatchString(line) && strings.Contains(line, "kubernetes.io/csi") {
			cause := "other"
			if i := slices.IndexFunc(reasons, func(r string) bool { return strings.Contains(line, r) }); i >= 0 {
				cause = reasons[i]
			}
			f.causes = append(f.causes, cause)
			pod := ""
			if m := failedPod.FindStringSubmatch(line); m != nil {
				pod = m[1]
			}
			f.pods = append(f.pods, pod)
			if len(f.examples) < 3 {
				f.examples = append(f.examples, line)
			}
		}
	}
	return len(p), nil
}

// Count returns how many mounts failed so far, and up to three of their log lines.
func (f *MountFailures) Count() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.causes), append([]string(nil), f.examples...)
}

// Pods returns how many mounts failed so far for each pod, by its name ("" for lines that do not
// name one).
func (f *MountFailures) Pods() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for _, p := range f.pods {
		out[p]++
	}
	return out
}

// List returns each failure's cause so far, in order: NotRegistered, fakecsi.NotServing,
// DriverGone or "other".
func (f *MountFailures) List() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.causes)
}

// Causes returns the causes of the failures after the first from, each once, in the order they
// first failed a mount: NotRegistered, fakecsi.NotServing, DriverGone or "other".
func (f *MountFailures) Causes(from int) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.causes[min(from, len(f.causes)):] {
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}
