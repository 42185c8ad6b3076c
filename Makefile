# Image URL to use all building/pushing image targets.
IMG ?= startup-taint-remover:latest

# Version stamped into the binary and its startup_taint_build_info metric.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS ?= -X github.com/startup-taint-remover/startup-taint-remover/internal/metrics.version=$(VERSION)

# Kubernetes version of the envtest control plane; built from source by hack/envtest.
ENVTEST_K8S_VERSION ?= 1.37.2
GOOS ?= $(shell go env GOOS)
GOARCH ?= $(shell go env GOARCH)
# Where setup-envtest keeps its binaries, so either tool finds the other's. KUBEBUILDER_ASSETS wins.
ENVTEST_ASSETS ?= $(HOME)/.local/share/kubebuilder-envtest/k8s/$(ENVTEST_K8S_VERSION)-$(GOOS)-$(GOARCH)
KUBEBUILDER_ASSETS ?= $(ENVTEST_ASSETS)
export KUBEBUILDER_ASSETS

# Setting SHELL to bash allows bash commands to be executed by recipes.
SHELL = /usr/bin/env bash -o pipefail
.SHELLFLAGS = -ec

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Display this help.
	@awk 'BEGIN {FS = ":.*##"; printf "\nUsage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-15s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Development

.PHONY: fmt
fmt: ## Run go fmt against code.
	go fmt ./...

.PHONY: vet
vet: ## Run go vet against code.
	go vet ./...

.PHONY: test
test: fmt vet envtest ## Run the unit, envtest and end-to-end tests with the race detector.
	go test -race ./... -coverprofile cover.out

.PHONY: demo
demo: envtest build ## Run the binary against a local control plane and a demo CSI driver.
	go run ./test/demo --binary=bin/startup-taint-remover

##@ Build

.PHONY: build
build: fmt vet ## Build the startup-taint-remover binary.
	go build -ldflags "$(LDFLAGS)" -o bin/startup-taint-remover ./cmd

.PHONY: run
run: fmt vet ## Run the controller from your host against the cluster in KUBECONFIG.
	go run ./cmd $(ARGS)

##@ Dependencies

.PHONY: envtest
envtest: ## Build kube-apiserver and etcd for envtest from their Go modules (once; skipped when present).
	@ENVTEST_K8S_VERSION=$(ENVTEST_K8S_VERSION) hack/envtest/build.sh "$(KUBEBUILDER_ASSETS)"
