// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/rest"
)

func TestCheckServerRefusesWhatTheServerCannotServe(t *testing.T) {
	v133 := &version.Info{Major: "1", Minor: "33", GitVersion: "v1.33.13"}
	emulated134 := &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2", EmulationMajor: "1", EmulationMinor: "34"}
	emulated133 := &version.Info{Major: "1", Minor: "37", GitVersion: "v1.37.2", EmulationMajor: "1", EmulationMinor: "33"}
	tests := []struct {
		name string
		args []string
		info *version.Info
		want string // the error's text, or "" for none
	}{
		{"resourceslice on 1.33", []string{"--taint=gpu.example.com/agent-not-ready", "--require-resourceslice=gpu.example.com"}, v133,
			"--require-resourceslice: needs ResourceSlices of resource.k8s.io/v1, which Kubernetes serves from 1.34; the API server runs v1.33.13"},
		{"resourceslice on 1.34, emulated", []string{"--taint=gpu.example.com/agent-not-ready", "--require-resourceslice=gpu.example.com"}, emulated134, ""},
		{"resourceslice on 1.33, emulated", []string{"--taint=gpu.example.com/agent-not-ready", "--require-resourceslice=gpu.example.com"}, emulated133,
			"the API server runs v1.33 (kube-apiserver v1.37.2 emulating it)"},
		{"a distribution's minor", []string{"--taint=gpu.example.com/agent-not-ready", "--require-resourceslice=gpu.example.com"}, &version.Info{Major: "1", Minor: "33+", GitVersion: "v1.33.5-eks"},
			"the API server runs v1.33.5-eks"},
		{"a version it cannot read", []string{"--taint=gpu.example.com/agent-not-ready", "--require-resourceslice=gpu.example.com"}, &version.Info{GitVersion: "unknown"}, ""},
		{"a CSI driver on 1.32", []string{"--csi-address=/csi.sock"}, &version.Info{Major: "1", Minor: "32", GitVersion: "v1.32.13"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, env(map[string]string{"NODE_NAME": "n"}), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = o.checkServer(tt.info)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("checkServer() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, errServerTooOld)):
				t.Errorf("checkServer() = %v, want errServerTooOld saying %q", err, tt.want)
			}
		})
	}
}

func TestCheckServerNamesTheGroupOfAConfigFile(t *testing.T) {
	o := &options{configFile: "/etc/groups.yaml", groups: []groupOptions{{name: "net"}, {name: "gpu", resourceSlices: []string{"gpu.example.com"}}}}
	err := o.checkServer(&version.Info{Major: "1", Minor: "33", GitVersion: "v1.33.13"})
	if err == nil || !strings.Contains(err.Error(), "--config /etc/groups.yaml: groups[1].require-resourceslice: needs") {
		t.Errorf("checkServer() = %v, want it to name groups[1].require-resourceslice of the file", err)
	}
}

func TestServerCheckAtStart(t *testing.T) {
	var answer atomic.Value // the /version body, or "" for 503
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := answer.Load().(string)
		if r.URL.Path != "/version" || body == "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, body)
	}))
	defer srv.Close()
	rc, err := versionClient(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseOptions([]string{"--taint=gpu.example.com/agent-not-ready", "--require-resourceslice=gpu.example.com"},
		env(map[string]string{"NODE_NAME": "n"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := &serverCheck{opts: o, rc: rc, log: logr.Discard()}

	if info, err := s.atStart(context.Background(), 300*time.Millisecond); info != nil || err != nil {
		t.Errorf("an API server that does not answer: atStart() = %v, %v; want nil, nil (the manager waits for it)", info, err)
	}
	answer.Store(`{"major":"1","minor":"33","gitVersion":"v1.33.13"}`)
	if _, err := s.atStart(context.Background(), time.Minute); !errors.Is(err, errServerTooOld) {
		t.Errorf("1.33 and --require-resourceslice: atStart() = %v, want errServerTooOld", err)
	}
	answer.Store(`{"major":"1","minor":"34","gitVersion":"v1.34.4"}`)
	if info, err := s.atStart(context.Background(), time.Minute); err != nil || info == nil || info.GitVersion != "v1.34.4" {
		t.Errorf("1.34: atStart() = %v, %v; want its version", info, err)
	}
}
