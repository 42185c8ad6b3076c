// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Command release builds what a release ships beside its binaries, without a container engine and
// without pulling a base image: the multi-arch image as an OCI image layout, and a CycloneDX SBOM
// per architecture, attached to the image. It is a module of its own, so go-containerregistry
// stays out of the main go.mod, which drivers that embed the controller import.
//
//	release image -dist DIR -version vX.Y.Z -revision SHA -source URL -created UNIX_SECONDS
//	release push -dist DIR -version vX.Y.Z -repository REGISTRY/PATH
//
// image reads DIR/startup-taint-remover-linux-{amd64,arm64}, writes DIR/image (the layout) and
// DIR/startup-taint-remover-linux-{amd64,arm64}.cdx.json, and prints the image index's digest.
// push pushes the layout's image index, tagged with the version, and its SBOMs, with the
// credentials of the docker config (docker login, cosign login), and prints the index's digest,
// then each platform's: "linux/ARCH DIGEST".
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Exit statuses: 2 for a bad command line, 1 when the build fails.
const (
	exitFailure  = 1
	exitBadInput = 2
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

var (
	semver   = regexp.MustCompile(`^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$`)
	revision = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 || (args[0] != "image" && args[0] != "push") {
		_, _ = fmt.Fprintln(stderr, "release: usage: release image|push -dist DIR -version vX.Y.Z [flags]")
		return exitBadInput
	}
	cmd := args[0]
	fs := flag.NewFlagSet("release "+cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dist := fs.String("dist", "", "the release directory: reads its linux binaries, writes image/ and the SBOMs")
	version := fs.String("version", "", "the release, vX.Y.Z")
	rev := fs.String("revision", "", "the commit the release is built from, 40 hex digits")
	source := fs.String("source", "", "the repository's URL, the image's source label")
	created := fs.String("created", "", "SOURCE_DATE_EPOCH: the commit's time in seconds since the epoch")
	repository := fs.String("repository", "", "the image repository to push to, REGISTRY/PATH (push)")
	if err := fs.Parse(args[1:]); err != nil {
		_, _ = fmt.Fprintf(stderr, "release %s: %v\n", cmd, err)
		return exitBadInput
	}
	bad := func(field, format string, a ...any) int {
		_, _ = fmt.Fprintf(stderr, "release %s: -%s: %s\n", cmd, field, fmt.Sprintf(format, a...))
		return exitBadInput
	}
	switch {
	case *dist == "":
		return bad("dist", "empty")
	case !semver.MatchString(*version):
		return bad("version", "%q is not vX.Y.Z", *version)
	case cmd == "push":
		repo, err := name.NewRepository(*repository)
		if err != nil {
			return bad("repository", "%v", err)
		}
		pushed, err := PushLayout(filepath.Join(*dist, "image"), repo, *version, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			_, _ = fmt.Fprintf(stderr, "release push: %v\n", err)
			return exitFailure
		}
		_, _ = fmt.Fprintln(stdout, pushed.Index)
		for _, arch := range Platforms {
			_, _ = fmt.Fprintf(stdout, "linux/%s %s\n", arch, pushed.Platforms[arch])
		}
		return 0
	case !revision.MatchString(*rev):
		return bad("revision", "%q is not a commit's 40 hex digits", *rev)
	case *source == "":
		return bad("source", "empty")
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil || secs < 0 {
		return bad("created", "%q is not seconds since the epoch", *created)
	}
	spec := ImageSpec{
		Binaries: map[string]string{}, SBOMs: map[string]string{},
		Version: *version, Revision: *rev, Source: *source, Created: time.Unix(secs, 0).UTC(),
	}
	for _, arch := range Platforms {
		binary := filepath.Join(*dist, binaryName+"-linux-"+arch)
		if _, err := os.Stat(binary); err != nil {
			return bad("dist", "no linux/%s binary: %v", arch, err)
		}
		spec.Binaries[arch], spec.SBOMs[arch] = binary, binary+".cdx.json"
	}
	digest, err := WriteImage(filepath.Join(*dist, "image"), spec)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "release image: %v\n", err)
		return exitFailure
	}
	_, _ = fmt.Fprintln(stdout, digest)
	return 0
}
