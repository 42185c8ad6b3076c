// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's one file, its path and its user: what the Dockerfile's distroless stage promises.
const (
	binaryName = "startup-taint-remover"
	nonroot    = "65532:65532"
)

// Platforms are the architectures of a release's image, in index order.
var Platforms = []string{"amd64", "arm64"}

// ImageSpec is what one release's image is built from.
type ImageSpec struct {
	// Binaries holds the static linux binary of each platform in Platforms, by GOARCH.
	Binaries map[string]string
	// SBOMs holds, by GOARCH, where to write each binary's CycloneDX SBOM.
	SBOMs map[string]string
	// Version, Revision and Source fill the OCI labels; Created is SOURCE_DATE_EPOCH's time.
	Version, Revision, Source string
	Created                   time.Time
}

// labels are the OCI annotations the image config carries as labels and the index as annotations.
func (s ImageSpec) labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       binaryName,
		"org.opencontainers.image.description": "Removes a node's startup taint once its node agents are really ready.",
		"org.opencontainers.image.source":      s.Source,
		"org.opencontainers.image.revision":    s.Revision,
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.created":     s.Created.UTC().Format(time.RFC3339),
		"org.opencontainers.image.licenses":    "Apache-2.0",
	}
}

// WriteImage writes the multi-arch image as an OCI image layout in dir, with each platform's SBOM
// attached as an OCI 1.1 referrer, and returns the image index's digest. Nothing in it depends on
// the build host or the time of the build: two builds of one commit give the same digest.
func WriteImage(dir string, s ImageSpec) (v1.Hash, error) {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var sboms []v1.Image
	for _, arch := range Platforms {
		img, err := platformImage(s, arch)
		if err != nil {
			return v1.Hash{}, fmt.Errorf("linux/%s: %w", arch, err)
		}
		platform := &v1.Platform{OS: "linux", Architecture: arch}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: platform}})

		if err := writeSBOM(s.Binaries[arch], s.SBOMs[arch], s.Version, s.Created); err != nil {
			return v1.Hash{}, err
		}
		subject, err := partial.Descriptor(img)
		if err != nil {
			return v1.Hash{}, err
		}
		sbom, err := sbomArtifact(s.SBOMs[arch], *subject, s.Created)
		if err != nil {
			return v1.Hash{}, err
		}
		sboms = append(sboms, sbom)
	}
	idxWithLabels, ok := mutate.Annotations(idx, s.labels()).(v1.ImageIndex)
	if !ok {
		return v1.Hash{}, fmt.Errorf("annotating the index: not an index")
	}
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := p.AppendIndex(idxWithLabels, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": s.Version,
	})); err != nil {
		return v1.Hash{}, err
	}
	for _, sbom := range sboms {
		if err := p.AppendImage(sbom); err != nil {
			return v1.Hash{}, err
		}
	}
	return idxWithLabels.Digest()
}

// platformImage is one platform's image: a single layer holding the binary alone, the user, the
// entrypoint and the labels, with every time set to Created.
func platformImage(s ImageSpec, arch string) (v1.Image, error) {
	layer, err := binaryLayer(s.Binaries[arch], s.Created)
	if err != nil {
		return nil, err
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: s.Created},
			CreatedBy: "make release: the static " + binaryName + " binary for linux/" + arch,
			Comment:   "built with go build -trimpath -buildvcs=false",
		},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", arch
	cfg.Created = v1.Time{Time: s.Created}
	cfg.Config = v1.Config{
		User:       nonroot,
		WorkingDir: "/",
		Entrypoint: []string{"/" + binaryName},
		Labels:     s.labels(),
	}
	return mutate.ConfigFile(img, cfg)
}

// binaryLayer is a gzipped tar of one entry, the binary at the root, owned by root and
// executable by all, its time Created: the layer's bytes depend on the binary alone.
func binaryLayer(binary string, created time.Time) (v1.Layer, error) {
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var tarred bytes.Buffer
	tw := tar.NewWriter(&tarred)
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: binaryName, Mode: 0o755, Size: int64(len(data)),
		ModTime: created.UTC(), Format: tar.FormatPAX,
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	// Compressed here, by the standard library with no name or time in the gzip header, so the
	// layer's digest does not depend on go-containerregistry's choice of compressor.
	var zipped bytes.Buffer
	zw, err := gzip.NewWriterLevel(&zipped, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(tarred.Bytes()); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	gz := zipped.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// emptyConfig is the OCI empty descriptor's content, the config of an artifact that has none.
var emptyConfig = []byte("{}")

// artifact is an OCI 1.1 artifact manifest with one blob: the SBOM referring to its image.
type artifact struct {
	manifest []byte
	blob     []byte
}

var _ partial.CompressedImageCore = (*artifact)(nil)

func (a *artifact) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d := sha256.Sum256(a.blob); h.Hex == fmt.Sprintf("%x", d) {
		return &blobLayer{a.blob}, nil
	}
	return nil, fmt.Errorf("the SBOM artifact has no blob %s", h)
}

// blobLayer serves the SBOM blob as a layer, which is how go-containerregistry writes blobs.
type blobLayer struct{ data []byte }

func (b *blobLayer) Digest() (v1.Hash, error) {
	h, _, err := v1.SHA256(bytes.NewReader(b.data))
	return h, err
}
func (b *blobLayer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(b.data)), nil
}
func (b *blobLayer) Size() (int64, error)                { return int64(len(b.data)), nil }
func (b *blobLayer) MediaType() (types.MediaType, error) { return sbomMediaType, nil }

// sbomArtifact attaches an SBOM file to its image as an OCI 1.1 referrer, which registries list
// under the image's digest and tools that copy an image with its referrers carry along.
func sbomArtifact(path string, subject v1.Descriptor, created time.Time) (v1.Image, error) {
	blob, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	blobHash, size, err := v1.SHA256(bytes.NewReader(blob))
	if err != nil {
		return nil, err
	}
	cfgHash, _, err := v1.SHA256(bytes.NewReader(emptyConfig))
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  sbomMediaType,
		Config: v1.Descriptor{
			MediaType: "application/vnd.oci.empty.v1+json", Size: int64(len(emptyConfig)),
			Digest: cfgHash, Data: emptyConfig,
		},
		Layers: []v1.Descriptor{{
			MediaType: sbomMediaType, Size: size, Digest: blobHash,
			Annotations: map[string]string{"org.opencontainers.image.title": filepath.Base(path)},
		}},
		Subject:     &subject,
		Annotations: map[string]string{"org.opencontainers.image.created": created.UTC().Format(time.RFC3339)},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, blob: blob})
}
