// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// spdx is the line every source file carries within its first lines, after a shebang and the
// copyright line: license scanners and SBOM tools read it, and LICENSE holds the text it names.
const spdx = "SPDX-License-Identifier: Apache-2.0"

// isSource says whether a file of the repository is code, which must carry the license header:
// Go, shell, the Makefile, Dockerfiles and CI's script. Manifests, docs and data are not.
func isSource(path string) bool {
	base := filepath.Base(path)
	return strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".sh") ||
		base == "Makefile" || base == "Dockerfile" || path == ".ci/run"
}

func TestEverySourceFileCarriesTheLicenseHeader(t *testing.T) {
	license, err := os.ReadFile(filepath.Join(repo, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(license), "Apache License\n                           Version 2.0, January 2004") {
		t.Error("LICENSE does not hold the Apache License 2.0")
	}
	// Tracked files and new ones not ignored, so a file is checked before it is committed.
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	checked := 0
	for _, path := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if !isSource(path) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(repo, path))
		if os.IsNotExist(err) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			t.Fatal(err)
		}
		head := strings.SplitN(string(data), "\n", 4)
		if !strings.Contains(strings.Join(head[:min(3, len(head))], "\n"), spdx) {
			t.Errorf("%s: no %q in its first three lines", path, spdx)
		}
		checked++
	}
	if checked < 100 {
		t.Fatalf("checked %d source files; git ls-files found too few", checked)
	}
}
