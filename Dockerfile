# Copyright 2026 The startup-taint-remover Authors.
# SPDX-License-Identifier: Apache-2.0

# Build the startup-taint-remover binary. `make docker-build` passes VERSION. For a multi-arch
# image, let buildx set TARGETOS and TARGETARCH per platform (the build cross-compiles, so the
# builder stage runs on the build host's platform):
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=v0.1.0 -t IMG --push .
# test/release builds what this file copies with its go build line, since the build host of the
# tests has no container engine; keep that line's flags equal to the Makefile's RELEASE_GOFLAGS.
FROM --platform=$BUILDPLATFORM golang:1.26.10 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev

WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download

COPY cmd/ cmd/
COPY controllers/ controllers/
COPY gates/ gates/
COPY internal/ internal/
COPY startuptaint/ startuptaint/

RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath -buildvcs=false \
    -ldflags "-s -w -X github.com/startup-taint-remover/startup-taint-remover/internal/metrics.version=${VERSION}" \
    -o startup-taint-remover ./cmd

# The binary alone, as make release builds the image (hack/release): no shell, no package
# manager, no CA bundle (the binary carries Mozilla's roots), run as a numeric non-root user.
FROM scratch
WORKDIR /
COPY --from=builder /workspace/startup-taint-remover /startup-taint-remover
USER 65532:65532

ENTRYPOINT ["/startup-taint-remover"]
