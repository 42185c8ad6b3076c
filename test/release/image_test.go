// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

//go:build release

package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// The release these tests check (built with -tags release): make test-release builds one into
// RELEASE_DIST, and a second
// build of the same commit into RELEASE_DIST_AGAIN. They are read here with the standard library
// alone, not with the library that wrote them, as a registry or a runtime would read them.
var (
	dist      = os.Getenv("RELEASE_DIST")
	distAgain = os.Getenv("RELEASE_DIST_AGAIN")
)

// The OCI types and keys the layout must use.
const (
	ociIndex    = "application/vnd.oci.image.index.v1+json"
	ociManifest = "application/vnd.oci.image.manifest.v1+json"
	ociConfig   = "application/vnd.oci.image.config.v1+json"
	ociLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	cycloneDX   = "application/vnd.cyclonedx+json"
	refName     = "org.opencontainers.image.ref.name"
)

type descriptor struct {
	MediaType    string            `json:"mediaType"`
	ArtifactType string            `json:"artifactType"`
	Digest       string            `json:"digest"`
	Size         int64             `json:"size"`
	Annotations  map[string]string `json:"annotations"`
	Platform     *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type index struct {
	SchemaVersion int               `json:"schemaVersion"`
	MediaType     string            `json:"mediaType"`
	Manifests     []descriptor      `json:"manifests"`
	Annotations   map[string]string `json:"annotations"`
}

type manifest struct {
	MediaType    string       `json:"mediaType"`
	ArtifactType string       `json:"artifactType"`
	Config       descriptor   `json:"config"`
	Layers       []descriptor `json:"layers"`
	Subject      *descriptor  `json:"subject"`
}

type imageConfig struct {
	OS           string `json:"os"`
	Architecture string `json:"architecture"`
	Created      string `json:"created"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Cmd        []string          `json:"Cmd"`
		Env        []string          `json:"Env"`
		WorkingDir string            `json:"WorkingDir"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// needDist fails a test run without a release: these tests build with -tags release, which only
// make test-release gives, after it builds one.
func needDist(t *testing.T) {
	t.Helper()
	if dist == "" {
		t.Fatal("RELEASE_DIST is unset: make test-release builds a release and runs these tests on it")
	}
}

// blob reads a blob of the layout and fails unless its content has the digest and size that
// name it.
func blob(t *testing.T, layout string, d descriptor) []byte {
	t.Helper()
	algo, hexDigest, ok := strings.Cut(d.Digest, ":")
	if !ok || algo != "sha256" {
		t.Fatalf("descriptor digest %q is not sha256", d.Digest)
	}
	data, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", hexDigest))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexDigest || int64(len(data)) != d.Size {
		t.Fatalf("blob %s: content does not match its digest or its size %d", d.Digest, d.Size)
	}
	return data
}

func decode(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
}

// releaseIndex returns the layout's top index and the descriptor of the release's image index.
func releaseIndex(t *testing.T, layout string) (index, descriptor) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(layout, "oci-layout"))
	if err != nil {
		t.Fatal(err)
	}
	var marker struct {
		ImageLayoutVersion string `json:"imageLayoutVersion"`
	}
	if decode(t, data, &marker); marker.ImageLayoutVersion != "1.0.0" {
		t.Fatalf("oci-layout: %s", data)
	}
	var top index
	data, err = os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	decode(t, data, &top)
	var found []descriptor
	for _, d := range top.Manifests {
		if d.MediaType == ociIndex {
			found = append(found, d)
		}
	}
	if len(found) != 1 || found[0].Annotations[refName] != version {
		t.Fatalf("index.json holds %d image indexes, want one named %s: %+v", len(found), version, found)
	}
	return top, found[0]
}

// commit returns HEAD's hash and time, which the release's labels and times carry.
func commit(t *testing.T) (string, time.Time) {
	t.Helper()
	out, err := exec.Command("git", "-C", repo, "log", "-1", "--format=%H %ct").Output()
	if err != nil {
		t.Fatal(err)
	}
	hash, secs, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	n, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return hash, time.Unix(n, 0).UTC()
}

// layerFiles returns the regular files of a gzipped tar layer, by name, and fails on any other
// entry: the image holds the binary alone.
func layerFiles(t *testing.T, gz []byte) (map[string][]byte, []*tar.Header) {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	var headers []*tar.Header
	tr := tar.NewReader(zr)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		headers = append(headers, hdr)
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = data
	}
	return files, headers
}

func TestTheImageIsTheTwoPlatformsOfTheBinaryAloneWithItsSBOMs(t *testing.T) {
	needDist(t)
	layout := filepath.Join(dist, "image")
	top, idxDesc := releaseIndex(t, layout)
	var idx index
	decode(t, blob(t, layout, idxDesc), &idx)
	rev, created := commit(t)
	wantLabels := map[string]string{
		"org.opencontainers.image.source":   "https://github.com/startup-taint-remover/startup-taint-remover",
		"org.opencontainers.image.revision": rev,
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.created":  created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	for k, v := range wantLabels {
		if idx.Annotations[k] != v {
			t.Errorf("index annotation %s = %q, want %q", k, idx.Annotations[k], v)
		}
	}
	if len(idx.Manifests) != 2 {
		t.Fatalf("the index has %d manifests, want linux/amd64 and linux/arm64", len(idx.Manifests))
	}
	for i, arch := range []string{"amd64", "arm64"} {
		d := idx.Manifests[i]
		if d.MediaType != ociManifest || d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch {
			t.Fatalf("manifest %d: %s %+v, want an OCI manifest for linux/%s", i, d.MediaType, d.Platform, arch)
		}
		checkPlatformImage(t, layout, d, arch, wantLabels, created)
		checkSBOMReferrer(t, layout, top, d, arch)
	}
}

// checkPlatformImage checks one platform's image: its config, and one layer holding the
// release's binary alone.
func checkPlatformImage(t *testing.T, layout string, d descriptor, arch string, wantLabels map[string]string, created time.Time) {
	t.Helper()
	var m manifest
	decode(t, blob(t, layout, d), &m)
	if m.Config.MediaType != ociConfig || len(m.Layers) != 1 || m.Layers[0].MediaType != ociLayer {
		t.Fatalf("linux/%s: config %s and %d layers, want an OCI config and one gzip layer", arch, m.Config.MediaType, len(m.Layers))
	}
	var cfg imageConfig
	decode(t, blob(t, layout, m.Config), &cfg)
	c := cfg.Config
	if cfg.OS != "linux" || cfg.Architecture != arch || c.User != "65532:65532" || c.WorkingDir != "/" ||
		fmt.Sprint(c.Entrypoint) != "[/startup-taint-remover]" || len(c.Cmd) != 0 || len(c.Env) != 0 {
		t.Errorf("linux/%s config: %s/%s user %q workdir %q entrypoint %v cmd %v env %v", arch, cfg.OS, cfg.Architecture,
			c.User, c.WorkingDir, c.Entrypoint, c.Cmd, c.Env)
	}
	if cfg.Created != created.Format(time.RFC3339) {
		t.Errorf("linux/%s created %s, want the commit's time %s (SOURCE_DATE_EPOCH)", arch, cfg.Created, created.Format(time.RFC3339))
	}
	for k, v := range wantLabels {
		if c.Labels[k] != v {
			t.Errorf("linux/%s label %s = %q, want %q", arch, k, c.Labels[k], v)
		}
	}

	gz := blob(t, layout, m.Layers[0])
	files, headers := layerFiles(t, gz)
	if len(headers) != 1 || headers[0].Name != "startup-taint-remover" || headers[0].Typeflag != tar.TypeReg ||
		headers[0].Mode != 0o755 || headers[0].Uid != 0 || !headers[0].ModTime.Equal(created) {
		t.Fatalf("linux/%s layer: %d entries, first %+v; want the binary alone, 0755, root's, of the commit's time", arch, len(headers), headers[0])
	}
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	tarred, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(tarred); len(cfg.RootFS.DiffIDs) != 1 || cfg.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("linux/%s diff_ids %v do not name the layer", arch, cfg.RootFS.DiffIDs)
	}
	shipped, err := os.ReadFile(filepath.Join(dist, "startup-taint-remover-linux-"+arch))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(files["startup-taint-remover"], shipped) {
		t.Errorf("linux/%s: the image's binary differs from the release's", arch)
	}
}

// checkSBOMReferrer checks that the one SBOM referring to a platform's image in the layout is the
// one shipped beside its binary.
func checkSBOMReferrer(t *testing.T, layout string, top index, d descriptor, arch string) {
	t.Helper()
	var referrers []descriptor
	for _, r := range top.Manifests {
		if r.ArtifactType != cycloneDX {
			continue
		}
		var am manifest
		decode(t, blob(t, layout, r), &am)
		if am.Subject != nil && am.Subject.Digest == d.Digest {
			referrers = append(referrers, am.Layers...)
		}
	}
	sbom, err := os.ReadFile(filepath.Join(dist, "startup-taint-remover-linux-"+arch+".cdx.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(referrers) != 1 || referrers[0].MediaType != cycloneDX || !bytes.Equal(blob(t, layout, referrers[0]), sbom) {
		t.Errorf("linux/%s: %d SBOM referrers, want the one shipped beside the binary", arch, len(referrers))
	}
}

func TestTwoBuildsOfOneCommitGiveTheSameImage(t *testing.T) {
	needDist(t)
	if distAgain == "" {
		t.Fatal("RELEASE_DIST_AGAIN is unset: make test-release builds the release twice")
	}
	_, first := releaseIndex(t, filepath.Join(dist, "image"))
	_, second := releaseIndex(t, filepath.Join(distAgain, "image"))
	if first.Digest != second.Digest {
		t.Fatalf("two builds of one commit: image indexes %s and %s", first.Digest, second.Digest)
	}
	sums := func(dir string) string {
		data, err := os.ReadFile(filepath.Join(dir, "checksums.txt"))
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if sums(dist) != sums(distAgain) {
		t.Fatalf("two builds of one commit: checksums differ:\n%s\n%s", sums(dist), sums(distAgain))
	}
	t.Logf("both builds: image index %s", first.Digest)
}

// imageBinary takes a platform's binary out of the image's layer, as a runtime would unpack it.
func imageBinary(t *testing.T, arch string) string {
	t.Helper()
	layout := filepath.Join(dist, "image")
	_, idxDesc := releaseIndex(t, layout)
	var idx index
	decode(t, blob(t, layout, idxDesc), &idx)
	for _, d := range idx.Manifests {
		if d.Platform == nil || d.Platform.Architecture != arch {
			continue
		}
		var m manifest
		decode(t, blob(t, layout, d), &m)
		files, _ := layerFiles(t, blob(t, layout, m.Layers[0]))
		path := filepath.Join(t.TempDir(), "startup-taint-remover")
		if err := os.WriteFile(path, files["startup-taint-remover"], 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	t.Fatalf("no linux/%s image", arch)
	return ""
}

// checkStaticStamped checks what can be read of a binary without running it: a static ELF for
// the architecture, stripped, built with -trimpath and cgo off by the toolchain of go.mod, the
// CA roots compiled in (the image has no bundle) and the release's version stamped.
func checkStaticStamped(t *testing.T, binary string, machine elf.Machine) {
	t.Helper()
	f, err := elf.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("ELF machine %s type %s, want %s ET_EXEC", f.Machine, f.Type, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP || p.Type == elf.PT_DYNAMIC {
			t.Error("the binary is dynamically linked; the image has no loader")
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary keeps its symbol table (-s)")
	}
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	if settings["-trimpath"] != "true" || settings["CGO_ENABLED"] != "0" || settings["vcs.revision"] != "" {
		t.Errorf("build settings %v, want -trimpath, CGO_ENABLED=0 and no VCS stamp", settings)
	}
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "toolchain " + info.GoVersion + "\n"; !strings.Contains(string(gomod), want) {
		t.Errorf("built with %s, not go.mod's toolchain line", info.GoVersion)
	}
	roots := false
	for _, m := range info.Deps {
		roots = roots || m.Path == "golang.org/x/crypto/x509roots/fallback"
	}
	if !roots {
		t.Error("the binary lacks golang.org/x/crypto/x509roots/fallback: an https --ready-url would not verify in the image")
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(version)) {
		t.Errorf("the binary does not carry the stamped version %s", version)
	}
}

func TestTheArm64BinaryIsStaticTrimmedAndStamped(t *testing.T) {
	needDist(t)
	checkStaticStamped(t, imageBinary(t, "arm64"), elf.EM_AARCH64)
}

func TestTheAmd64BinaryOfTheImageRemovesATaintFromARealAPIServer(t *testing.T) {
	needDist(t)
	binary := imageBinary(t, "amd64")
	checkStaticStamped(t, binary, elf.EM_X86_64)
	out, err := exec.Command(binary, "--version").Output()
	if err != nil || string(out) != "startup-taint-remover "+version+"\n" {
		t.Fatalf("--version printed %q (%v), want the stamped %s", out, err, version)
	}

	env, c := testkit.StartEnvtest(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := testkit.WriteKubeconfig(env, envtest.User{Name: "release", Groups: []string{"system:masters"}}, kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	taint := corev1.Taint{Key: "release.example.com/agent-not-ready", Effect: corev1.TaintEffectNoSchedule}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "release"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{taint}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(t.TempDir(), "ready")
	if err := os.WriteFile(ready, []byte("ready"), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.CommandContext(ctx, binary, "--kubeconfig="+kubeconfig, testkit.Unconfined, "--node-name="+node.Name,
		"--taint="+taint.ToString(), "--ready-file="+ready, "--metrics-bind-address=0", "--health-probe-bind-address=0")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for {
		if err := c.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			t.Fatalf("%v\n%s", err, logs.String())
		}
		// The API server's admission adds node.kubernetes.io/not-ready to a new Node; only ours goes.
		held := false
		for _, tt := range node.Spec.Taints {
			held = held || tt.MatchTaint(&taint)
		}
		if !held {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the image's binary left the taint: %v\n%s", node.Spec.Taints, logs.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// moduleLine is one module line of `go version -m`: dep or its replacement (=>).
type moduleLine struct{ path, version string }

func TestEachSBOMListsEveryModuleOfItsBinary(t *testing.T) {
	needDist(t)
	for _, arch := range []string{"amd64", "arm64"} {
		binary := filepath.Join(dist, "startup-taint-remover-linux-"+arch)
		out, err := exec.Command("go", "version", "-m", binary).Output()
		if err != nil {
			t.Fatal(err)
		}
		// The first line is "PATH: goVERSION", the toolchain, which the SBOM lists as std.
		first := strings.SplitN(string(out), "\n", 2)[0]
		goVersion := first[strings.LastIndex(first, " ")+1:]
		want := map[moduleLine]bool{{"std", goVersion}: true}
		var last *moduleLine
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) >= 3 && f[0] == "dep":
				m := moduleLine{f[1], f[2]}
				want[m], last = true, &m
			case len(f) >= 3 && f[0] == "=>" && last != nil:
				// A replaced module is listed as what the binary links, its replacement.
				delete(want, *last)
				want[moduleLine{f[1], f[2]}] = true
			}
		}
		if len(want) < 20 {
			t.Fatalf("go version -m listed %d modules of %s:\n%s", len(want), binary, out)
		}
		data, err := os.ReadFile(binary + ".cdx.json")
		if err != nil {
			t.Fatal(err)
		}
		var bom struct {
			BOMFormat string `json:"bomFormat"`
			Metadata  struct {
				Component struct{ Name, Version, PURL string }
			} `json:"metadata"`
			Components []struct{ Name, Version, PURL string }
		}
		decode(t, data, &bom)
		if bom.BOMFormat != "CycloneDX" || bom.Metadata.Component.Version != version ||
			bom.Metadata.Component.Name != "github.com/startup-taint-remover/startup-taint-remover" {
			t.Errorf("linux/%s SBOM describes %+v, want the release %s", arch, bom.Metadata.Component, version)
		}
		listed := map[moduleLine]bool{}
		for _, c := range bom.Components {
			listed[moduleLine{c.Name, c.Version}] = true
			if c.PURL != "pkg:golang/"+c.Name+"@"+c.Version+"?type=module" {
				t.Errorf("linux/%s SBOM: %s@%s has purl %q", arch, c.Name, c.Version, c.PURL)
			}
		}
		for m := range want {
			if !listed[m] {
				t.Errorf("linux/%s SBOM lacks %s %s, which go version -m reports", arch, m.path, m.version)
			}
		}
		if len(listed) != len(want) {
			t.Errorf("linux/%s SBOM lists %d components, go version -m %d modules", arch, len(listed), len(want))
		}
	}
}
