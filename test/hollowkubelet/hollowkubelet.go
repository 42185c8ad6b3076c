// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package hollowkubelet runs kubemark's hollow node as a process: the real kubelet code with a
// fake container runtime. It registers its Node, writes its CSINode, and registers CSI drivers
// through its plugin watcher as a kubelet does, so the tests need not write what kubelet would.
// hack/envtest builds the kubemark binary beside the envtest binaries.
package hollowkubelet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// Kubelet is a running hollow kubelet.
type Kubelet struct {
	// Node is the name it registers.
	Node string
	// RootDir is its root directory; CSI drivers register through RootDir/plugins_registry.
	RootDir string

	cmd    *exec.Cmd
	exited chan struct{}
	mu     sync.Mutex
	err    error
}

// Options say how to start a hollow kubelet.
type Options struct {
	// Binary is kubemark's path; the one beside the envtest binaries when empty.
	Binary string
	// Kubeconfig is the identity the kubelet talks to the API server with.
	Kubeconfig string
	// Node is the name it registers.
	Node string
	// RegisterWithTaints are the taints it registers its Node with.
	RegisterWithTaints []corev1.Taint
	// Labels are the labels it registers its Node with (--node-labels), as a node pool sets them.
	Labels map[string]string
	// Port is its kubelet port (it serves nothing the tests use, but must not collide); a free
	// one when zero.
	Port int
	// Log receives its output.
	Log io.Writer
}

var rootDirLine = regexp.MustCompile(`Using (\S+) as root dir for hollow-kubelet`)

// Start starts a hollow kubelet and returns once its plugin watcher has created the plugins
// registry.
func Start(o Options) (*Kubelet, error) {
	var err error
	if o.Binary == "" {
		if o.Binary, err = testkit.EnvtestBinary("kubemark"); err != nil {
			return nil, err
		}
	}
	if o.Port == 0 {
		if o.Port, err = kubeletPort(); err != nil {
			return nil, err
		}
	}
	taints := make([]string, len(o.RegisterWithTaints))
	for i, t := range o.RegisterWithTaints {
		taints[i] = t.Key + "=" + t.Value + ":" + string(t.Effect)
	}
	args := []string{"--morph=kubelet", "--name=" + o.Node, "--kubeconfig=" + o.Kubeconfig,
		"--kubelet-port=" + strconv.Itoa(o.Port), "--kubelet-read-only-port=0", "--use-host-image-service=false",
		// One flag: a repeated --register-with-taints replaces the earlier list.
		"--register-with-taints=" + strings.Join(taints, ",")}
	if len(o.Labels) > 0 {
		labels := make([]string, 0, len(o.Labels))
		for k, v := range o.Labels {
			labels = append(labels, k+"="+v)
		}
		args = append(args, "--node-labels="+strings.Join(labels, ","))
	}
	cmd := exec.Command(o.Binary, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StderrPipe()
	if err != nil {
		return nil, fmt.Errorf("hollow kubelet: %w", err)
	}
	cmd.Stdout = o.Log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the hollow kubelet: %w", err)
	}
	k := &Kubelet{Node: o.Node, cmd: cmd, exited: make(chan struct{})}
	root := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(out)
		scanner.Buffer(make([]byte, 64*1024), 1024*1024)
		for scanner.Scan() {
			line := scanner.Text()
			_, _ = fmt.Fprintln(o.Log, line)
			if m := rootDirLine.FindStringSubmatch(line); m != nil {
				select {
				case root <- m[1]:
				default:
				}
			}
		}
	}()
	go func() {
		err := cmd.Wait()
		k.mu.Lock()
		k.err = err
		k.mu.Unlock()
		close(k.exited)
	}()
	deadline := time.After(time.Minute)
	select {
	case k.RootDir = <-root:
	case <-k.exited:
		return nil, fmt.Errorf("the hollow kubelet exited before it started: %w", k.Err())
	case <-deadline:
		k.Stop()
		return nil, errors.New("the hollow kubelet did not tell its root dir within a minute")
	}
	for {
		if _, err := os.Stat(k.PluginsRegistry()); err == nil {
			return k, nil
		}
		select {
		case <-k.exited:
			return nil, fmt.Errorf("the hollow kubelet exited before it started: %w", k.Err())
		case <-deadline:
			k.Stop()
			return nil, errors.New("the hollow kubelet's plugin watcher did not start within a minute")
		case <-time.After(20 * time.Millisecond):
		}
	}
}

var (
	portsMu sync.Mutex
	// nextPort is the next port kubeletPort tries; it starts at random, so that two processes
	// starting kubelets rarely try the same ports.
	nextPort = 20000 + rand.IntN(10000)
)

// kubeletPort returns a free port below the ephemeral range (32768 and up on Linux) that no other
// kubelet of this process was given. A port the kernel handed out as free can be taken by an
// outgoing connection's local port before kubelet binds it, and kubelet exits when it cannot
// listen: the likeliest reason one of ten kubelets starting at once exited in a benchmark.
func kubeletPort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for ; nextPort < 32768; nextPort++ {
		port := nextPort
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			_ = l.Close()
			nextPort++
			return port, nil
		}
	}
	return 0, errors.New("no free port below 32768 for the hollow kubelet")
}

// PluginsRegistry is the directory whose sockets kubelet's plugin watcher registers.
func (k *Kubelet) PluginsRegistry() string { return filepath.Join(k.RootDir, "plugins_registry") }

// Err is how the process ended, once it has.
func (k *Kubelet) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// Exited is closed when the process has ended.
func (k *Kubelet) Exited() <-chan struct{} { return k.exited }

// Stop ends the kubelet (SIGTERM, then SIGKILL after 10 s) and waits for it.
func (k *Kubelet) Stop() {
	_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-k.exited:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-k.cmd.Process.Pid, syscall.SIGKILL)
		<-k.exited
	}
}
