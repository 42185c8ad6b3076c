// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"sort"
	"strings"
	"time"
)

// sbomMediaType is CycloneDX's JSON media type, the artifact type of the SBOM attached to each
// platform's image.
const sbomMediaType = "application/vnd.cyclonedx+json"

// The CycloneDX 1.6 document, reduced to the fields this SBOM fills.
type (
	bom struct {
		BOMFormat    string       `json:"bomFormat"`
		SpecVersion  string       `json:"specVersion"`
		SerialNumber string       `json:"serialNumber"`
		Version      int          `json:"version"`
		Metadata     bomMetadata  `json:"metadata"`
		Components   []component  `json:"components"`
		Dependencies []dependency `json:"dependencies"`
	}
	bomMetadata struct {
		Timestamp string    `json:"timestamp"`
		Component component `json:"component"`
	}
	component struct {
		Type       string     `json:"type"`
		BOMRef     string     `json:"bom-ref"`
		Name       string     `json:"name"`
		Version    string     `json:"version"`
		PURL       string     `json:"purl"`
		Hashes     []hash     `json:"hashes,omitempty"`
		Licenses   []license  `json:"licenses,omitempty"`
		Properties []property `json:"properties,omitempty"`
	}
	hash struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	}
	license struct {
		License struct {
			ID string `json:"id"`
		} `json:"license"`
	}
	property struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	dependency struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn"`
	}
)

// purl is a Go module's package URL, as cyclonedx-gomod and the OSV database name it.
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version + "?type=module"
}

// moduleComponent describes one module the binary links, replacements resolved. Its hash is the
// go.sum h1 hash (the SHA-256 of the module's file list) in hex, as cyclonedx-gomod writes it.
func moduleComponent(m *debug.Module) component {
	if m.Replace != nil {
		m = m.Replace
	}
	c := component{Type: "library", Name: m.Path, Version: m.Version, PURL: purl(m.Path, m.Version)}
	c.BOMRef = c.PURL
	if sum, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
		if raw, err := base64.StdEncoding.DecodeString(sum); err == nil {
			c.Hashes = []hash{{Alg: "SHA-256", Content: hex.EncodeToString(raw)}}
		}
	}
	return c
}

// writeSBOM writes the CycloneDX SBOM of a Go binary, read from the build information the Go
// linker records, so it lists exactly what `go version -m` reports: the main module, every
// module linked and the standard library of the toolchain. The binary's SHA-256 names it, which
// makes the document, like the image, the same for every build of one commit. The main module's
// version is the release's: a build without VCS stamps records "(devel)".
func writeSBOM(binary, out, version string, created time.Time) error {
	info, err := buildinfo.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("reading the build information of %s: %w", binary, err)
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(data)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	goos, goarch := settings["GOOS"], settings["GOARCH"]

	main := component{
		Type: "application", Name: info.Main.Path, Version: version,
		PURL:   purl(info.Main.Path, version) + "&goos=" + goos + "&goarch=" + goarch,
		Hashes: []hash{{Alg: "SHA-256", Content: hex.EncodeToString(sum[:])}},
	}
	main.BOMRef = main.PURL
	main.Licenses = []license{{}}
	main.Licenses[0].License.ID = "Apache-2.0"
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		main.Properties = append(main.Properties, property{Name: "cdx:gomod:build:env:" + k, Value: settings[k]})
	}

	std := component{Type: "library", Name: "std", Version: info.GoVersion, PURL: purl("std", info.GoVersion)}
	std.BOMRef = std.PURL
	components := []component{std}
	for _, m := range info.Deps {
		components = append(components, moduleComponent(m))
	}
	sort.Slice(components, func(i, j int) bool { return components[i].BOMRef < components[j].BOMRef })
	deps := dependency{Ref: main.BOMRef, DependsOn: []string{}}
	for _, c := range components {
		deps.DependsOn = append(deps.DependsOn, c.BOMRef)
	}

	doc := bom{
		BOMFormat: "CycloneDX", SpecVersion: "1.6", SerialNumber: uuidURN(sum[:]), Version: 1,
		Metadata:     bomMetadata{Timestamp: created.UTC().Format(time.RFC3339), Component: main},
		Components:   components,
		Dependencies: []dependency{deps},
	}
	text, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(text, '\n'), 0o644)
}

// uuidURN makes a version-4-shaped UUID from a digest, so a document's serial number is unique
// to its binary yet the same in every build of it.
func uuidURN(digest []byte) string {
	u := make([]byte, 16)
	copy(u, digest)
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	h := hex.EncodeToString(u)
	return "urn:uuid:" + h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
