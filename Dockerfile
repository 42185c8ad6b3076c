# Build the startup-taint-remover binary.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev

WORKDIR /workspace
COPY go.mod go.sum ./
RUN go mod download

COPY cmd/ cmd/
COPY controllers/ controllers/
COPY internal/ internal/

RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} go build -trimpath \
    -ldflags "-s -w -X github.com/startup-taint-remover/startup-taint-remover/internal/metrics.version=${VERSION}" \
    -o startup-taint-remover ./cmd

# A static binary on distroless: no shell, no package manager, non-root by default.
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/startup-taint-remover .
USER 65532:65532

ENTRYPOINT ["/startup-taint-remover"]
