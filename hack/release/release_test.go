// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// What make test-release hands these tests: the release it built (RELEASE_DIST), the throwaway cosign key pair that signed its checksums.txt
// (RELEASE_SIGNING_KEY, the private key's path; the public key beside it, .pub), and the chart
// tool.
var (
	dist       = os.Getenv("RELEASE_DIST")
	signingKey = os.Getenv("RELEASE_SIGNING_KEY")
	chartTool  = os.Getenv("CHART_TOOL")
)

// testVersion is the release's: make test-release passes its TEST_VERSION.
var testVersion = cmp.Or(os.Getenv("RELEASE_VERSION"), "v0.0.0-test")

func needRelease(t *testing.T) {
	t.Helper()
	if dist == "" || signingKey == "" || chartTool == "" {
		t.Fatal("RELEASE_DIST, RELEASE_SIGNING_KEY or CHART_TOOL is unset: make test-release sets them")
	}
}

// mustRun runs a command and returns its standard output, failing the test on an error.
func mustRun(t *testing.T, env []string, program string, args ...string) string {
	t.Helper()
	out, err := command(env, program, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", program, strings.Join(args, " "), err, out)
	}
	return out
}

func command(env []string, program string, args ...string) (string, error) {
	cmd := exec.Command(program, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// cosignEnv keeps cosign on this machine: no transparency log, and its TUF look-up for Sigstore's
// public roots, which key-based verification does not need, fails on loopback rather than leaving
// the host.
func cosignEnv(t *testing.T) []string {
	return []string{"COSIGN_PASSWORD=", "TUF_ROOT=" + t.TempDir(), "TUF_MIRROR=http://127.0.0.1:1", "COSIGN_EXPERIMENTAL=0"}
}

// registryFlags let cosign talk to the test's registry, plain HTTP on loopback.
var registryFlags = []string{"--allow-http-registry", "--allow-insecure-registry"}

// cosign runs the cosign pinned in this module's go.mod (go tool builds it once) and returns its
// output and error.
func cosign(t *testing.T, args ...string) (string, error) {
	return command(cosignEnv(t), "go", append([]string{"tool", "cosign"}, args...)...)
}

// pushLayout pushes the release's layout to repo as the release workflow does and returns what it
// pushed.
func pushLayout(t *testing.T, repo name.Repository) Pushed {
	t.Helper()
	pushed, err := PushLayout(filepath.Join(dist, "image"), repo, testVersion)
	if err != nil {
		t.Fatal(err)
	}
	if len(pushed.Platforms) != len(Platforms) {
		t.Fatalf("pushed the platforms %v, want %v", pushed.Platforms, Platforms)
	}
	return pushed
}

// startRegistryWithRelease serves an OCI registry on loopback for the test, pushes the release's
// layout to it, and returns its host, the image repository and what was pushed.
func startRegistryWithRelease(t *testing.T) (string, name.Repository, Pushed) {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	repo, err := name.NewRepository(host+"/startup-taint-remover", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	return host, repo, pushLayout(t, repo)
}

// renderedImage matches the image a rendered DaemonSet runs: REPOSITORY:TAG@DIGEST.
var renderedImage = regexp.MustCompile(`image: "([^":@]+):([^"@]+)@(sha256:[0-9a-f]{64})"`)

func TestTheChartFromTheRegistryRunsThePushedImageByDigest(t *testing.T) {
	needRelease(t)
	host, repo, pushed := startRegistryWithRelease(t)
	digest := pushed.Index

	charts, err := filepath.Glob(filepath.Join(dist, "startup-taint-remover-*.tgz"))
	if err != nil || len(charts) != 1 {
		t.Fatalf("the release holds %d charts (%v)", len(charts), err)
	}
	helmHome := []string{"HELM_CACHE_HOME=" + t.TempDir(), "HELM_CONFIG_HOME=" + t.TempDir(), "HELM_DATA_HOME=" + t.TempDir()}
	mustRun(t, helmHome, chartTool, "push", charts[0], "-to", "oci://"+host+"/charts", "-plain-http")
	out := mustRun(t, helmHome, chartTool, "template", "oci://"+host+"/charts/startup-taint-remover",
		"-chart-version", strings.TrimPrefix(testVersion, "v"), "-plain-http")
	images := renderedImage.FindAllStringSubmatch(out, -1)
	if len(images) != 1 || images[0][2] != testVersion || images[0][3] != digest.String() {
		t.Fatalf("the chart pulled from the registry runs %v, want one image of tag %s pinned to the pushed %s", images, testVersion, digest)
	}

	// Pulling what the chart names gives back the tested layout, manifest for manifest.
	pulled, err := remote.Index(repo.Digest(images[0][3]))
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(filepath.Join(dist, "image"))
	if err != nil {
		t.Fatal(err)
	}
	tested, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	local, err := tested.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	pm, err := pulled.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range pm.Manifests {
		remoteImg, err := pulled.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		localImg, err := local.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		rl, err := remoteImg.Layers()
		if err != nil {
			t.Fatal(err)
		}
		ll, err := localImg.Layers()
		if err != nil {
			t.Fatal(err)
		}
		rd, _ := rl[0].Digest()
		ld, _ := ll[0].Digest()
		if len(rl) != 1 || rd != ld {
			t.Errorf("%s: the registry's layer %s is not the layout's %s", d.Platform, rd, ld)
		}
		// The SBOM travels with the image: the registry lists it among the platform's referrers.
		refs, err := remote.Referrers(repo.Digest(d.Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		rm, err := refs.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(rm.Manifests) != 1 {
			t.Fatalf("%s: referrers %+v, want its SBOM", d.Platform, rm.Manifests)
		}
		// The manifest itself, not the listing: go-containerregistry's registry lists the config's
		// media type where the artifact type belongs.
		ref, err := remote.Image(repo.Digest(rm.Manifests[0].Digest.String()))
		if err != nil {
			t.Fatal(err)
		}
		raw, err := ref.RawManifest()
		if err != nil {
			t.Fatal(err)
		}
		var am v1.Manifest
		if err := json.Unmarshal(raw, &am); err != nil {
			t.Fatal(err)
		}
		sbom, err := os.ReadFile(filepath.Join(dist, "startup-taint-remover-linux-"+d.Platform.Architecture+".cdx.json"))
		if err != nil {
			t.Fatal(err)
		}
		want, _, _ := v1.SHA256(bytes.NewReader(sbom))
		if am.ArtifactType != sbomMediaType || len(am.Layers) != 1 || am.Layers[0].Digest != want {
			t.Errorf("%s: the referrer is %s with %d blobs, want its SBOM %s", d.Platform, am.ArtifactType, len(am.Layers), want)
		}
	}
}

func TestSignaturesVerifyWithTheKeyAndFailWithAnotherKeyOrATamperedFile(t *testing.T) {
	needRelease(t)
	host, repo, pushed := startRegistryWithRelease(t)
	digest := pushed.Index
	helmHome := []string{"HELM_CACHE_HOME=" + t.TempDir(), "HELM_CONFIG_HOME=" + t.TempDir(), "HELM_DATA_HOME=" + t.TempDir()}
	charts, _ := filepath.Glob(filepath.Join(dist, "startup-taint-remover-*.tgz"))
	chartDigest := strings.TrimSpace(mustRun(t, helmHome, chartTool, "push", charts[0], "-to", "oci://"+host+"/charts", "-plain-http"))
	chartRef := host + "/charts/startup-taint-remover@" + chartDigest
	imageRef := repo.Digest(digest.String()).String()

	pub := strings.TrimSuffix(signingKey, ".key") + ".pub"
	other := filepath.Join(t.TempDir(), "other")
	if out, err := cosign(t, "generate-key-pair", "--output-key-prefix", other); err != nil {
		t.Fatalf("cosign generate-key-pair: %v\n%s", err, out)
	}
	wrong := other + ".pub"

	// The image index and the chart, signed by digest as the release workflow signs them, and
	// each platform's SBOM as a CycloneDX attestation of its image.
	for _, ref := range []string{imageRef, chartRef} {
		if out, err := cosign(t, append([]string{"sign", "--yes", "--key", signingKey, "--tlog-upload=false"}, append(registryFlags, ref)...)...); err != nil {
			t.Fatalf("cosign sign %s: %v\n%s", ref, err, out)
		}
	}
	for arch, platformDigest := range pushed.Platforms {
		ref := repo.Digest(platformDigest.String()).String()
		sbom := filepath.Join(dist, "startup-taint-remover-linux-"+arch+".cdx.json")
		if out, err := cosign(t, append([]string{"attest", "--yes", "--key", signingKey, "--tlog-upload=false",
			"--type", "cyclonedx", "--predicate", sbom}, append(registryFlags, ref)...)...); err != nil {
			t.Fatalf("cosign attest %s: %v\n%s", ref, err, out)
		}
		verify := append([]string{"verify-attestation", "--key", pub, "--insecure-ignore-tlog=true", "--type", "cyclonedx"}, append(registryFlags, ref)...)
		if out, err := cosign(t, verify...); err != nil {
			t.Errorf("cosign verify-attestation %s: %v\n%s", ref, err, out)
		}
	}

	verify := func(key string, args ...string) error {
		_, err := cosign(t, append([]string{"verify", "--key", key, "--insecure-ignore-tlog=true"}, append(registryFlags, args...)...)...)
		return err
	}
	verifyBlob := func(key, file string) error {
		_, err := cosign(t, "verify-blob", "--key", key, "--insecure-ignore-tlog=true",
			"--signature", filepath.Join(dist, "checksums.txt.sig"), file)
		return err
	}
	for _, ref := range []string{imageRef, chartRef} {
		if err := verify(pub, ref); err != nil {
			t.Errorf("%s does not verify with the release's key: %v", ref, err)
		}
		if err := verify(wrong, ref); err == nil {
			t.Errorf("%s verifies with another key", ref)
		}
	}
	checksums := filepath.Join(dist, "checksums.txt")
	if err := verifyBlob(pub, checksums); err != nil {
		t.Errorf("checksums.txt does not verify with the release's key: %v", err)
	}
	if err := verifyBlob(wrong, checksums); err == nil {
		t.Error("checksums.txt verifies with another key")
	}
	data, err := os.ReadFile(checksums)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(t.TempDir(), "checksums.txt")
	if err := os.WriteFile(tampered, bytes.Replace(data, []byte("0"), []byte("1"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := verifyBlob(pub, tampered); err == nil {
		t.Error("a tampered checksums.txt verifies")
	}

	// A chart pushed again under the release's tag, changed, has no signature: what users pull by
	// tag verifies only while it is what was signed.
	changed := filepath.Join(t.TempDir(), filepath.Base(charts[0]))
	mustRun(t, nil, "sh", "-c", "mkdir -p "+filepath.Dir(changed)+"/x && tar -xzf "+charts[0]+" -C "+filepath.Dir(changed)+
		"/x && echo '# changed' >> "+filepath.Dir(changed)+"/x/startup-taint-remover/values.yaml && tar -czf "+changed+" -C "+
		filepath.Dir(changed)+"/x startup-taint-remover")
	mustRun(t, helmHome, chartTool, "push", changed, "-to", "oci://"+host+"/charts", "-plain-http")
	tag := host + "/charts/startup-taint-remover:" + strings.TrimPrefix(testVersion, "v")
	if err := verify(pub, tag); err == nil {
		t.Error("a chart changed and pushed again under the release's tag verifies")
	}
}
