// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package release checks the build paths of a release that the build host cannot run itself: it
// has no container engine, so the Dockerfile is checked by building exactly what it copies with
// exactly its go build line.
package release

import (
	"cmp"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

const (
	repo = "../.."
	// stamp is the -X flag that writes the version into the binary.
	stamp = "-X github.com/startup-taint-remover/startup-taint-remover/internal/metrics.version="
)

// version is the release's: make test-release passes its TEST_VERSION.
var version = cmp.Or(os.Getenv("RELEASE_VERSION"), "v0.0.0-test")

// builderStage returns the Dockerfile's first stage as instructions, continuation lines joined.
func builderStage(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := regexp.MustCompile(`\\\n\s*`).ReplaceAllString(string(data), "")
	var out []string
	stages := 0
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "FROM ") {
			if stages++; stages > 1 {
				break
			}
		}
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}

// copyTree copies src (a file, or a directory's contents when it ends in /) to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestTheDockerfileBuildsAStaticStrippedStampedBinaryFromWhatItCopies(t *testing.T) {
	workspace := t.TempDir()
	// .dockerignore excludes everything but what it names with !: the build context.
	ignore, err := os.ReadFile(filepath.Join(repo, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	// The golang image runs with GOTOOLCHAIN=local: its tag must be go.mod's toolchain.
	gomod, err := os.ReadFile(filepath.Join(repo, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	toolchain := regexp.MustCompile(`(?m)^toolchain go(\S+)$`).FindSubmatch(gomod)
	if toolchain == nil || !strings.Contains(strings.Join(builderStage(t), "\n"), "FROM --platform=$BUILDPLATFORM golang:"+string(toolchain[1])+" ") {
		t.Errorf("the Dockerfile's builder is not golang: and go.mod's toolchain")
	}
	inContext := map[string]bool{}
	for _, line := range strings.Split(string(ignore), "\n") {
		if path, ok := strings.CutPrefix(strings.TrimSpace(line), "!"); ok {
			inContext[path] = true
		}
	}
	var build string
	for _, instr := range builderStage(t) {
		fields := strings.Fields(instr)
		switch {
		case fields[0] == "COPY" && !strings.HasPrefix(fields[1], "--from="):
			srcs, dst := fields[1:len(fields)-1], filepath.Join(workspace, fields[len(fields)-1])
			for _, src := range srcs {
				if !inContext[src] {
					t.Errorf("the Dockerfile copies %s, which .dockerignore leaves out of the build context", src)
				}
				target := dst
				if !strings.HasSuffix(src, "/") {
					target = filepath.Join(dst, filepath.Base(src))
				}
				copyTree(t, filepath.Join(repo, src), target)
			}
		case fields[0] == "RUN" && strings.Contains(instr, "go build"):
			build = strings.TrimPrefix(instr, "RUN ")
		}
	}
	if build == "" {
		t.Fatal("the Dockerfile's builder stage has no go build line")
	}
	for _, flag := range []string{"CGO_ENABLED=0", "-trimpath -buildvcs=false", `-ldflags "-s -w ` + stamp + `${VERSION}"`} {
		if !strings.Contains(build, flag) {
			t.Errorf("the Dockerfile's go build line lacks %s: %s", flag, build)
		}
	}
	makefile, err := os.ReadFile(filepath.Join(repo, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"RELEASE_GOFLAGS = -trimpath -buildvcs=false -ldflags \"-s -w $(LDFLAGS)\"", "LDFLAGS ?= " + stamp + "$(VERSION)"} {
		if !strings.Contains(string(makefile), line) {
			t.Errorf("the Makefile's release flags differ from the Dockerfile's: want %q", line)
		}
	}

	build = strings.NewReplacer("${TARGETOS:-linux}", "linux", "${TARGETARCH}", runtime.GOARCH, "${VERSION}", version).Replace(build)
	cmd := exec.Command("sh", "-c", build)
	cmd.Dir = workspace
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build, err, out)
	}
	binary := filepath.Join(workspace, "startup-taint-remover")

	f, err := elf.Open(binary)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("the binary needs a dynamic loader; distroless/static has none")
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("the binary keeps its symbol table (-s)")
	}
	out, err := exec.Command(binary, "--version").Output()
	if err != nil || string(out) != "startup-taint-remover "+version+"\n" {
		t.Fatalf("--version printed %q (%v), want the stamped %s", out, err, version)
	}
}
