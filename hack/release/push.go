// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Pushed is what PushLayout wrote: the image index, tagged with the version, and each platform's
// image, which the SBOMs refer to and the release workflow attests.
type Pushed struct {
	Index     v1.Hash
	Platforms map[string]v1.Hash // by GOARCH
}

// PushLayout pushes the release's image index from an OCI layout to repo, tagged version, and
// every SBOM that refers to one of its images, by digest: a registry with the referrers API lists
// them under their image, and others under the fallback tag go-containerregistry writes.
func PushLayout(dir string, repo name.Repository, version string, opts ...remote.Option) (Pushed, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return Pushed{}, err
	}
	top, err := p.ImageIndex()
	if err != nil {
		return Pushed{}, err
	}
	m, err := top.IndexManifest()
	if err != nil {
		return Pushed{}, err
	}
	pushed := Pushed{Platforms: map[string]v1.Hash{}}
	for _, d := range m.Manifests {
		if d.Annotations["org.opencontainers.image.ref.name"] != version {
			continue
		}
		idx, err := top.ImageIndex(d.Digest)
		if err != nil {
			return Pushed{}, err
		}
		if err := remote.WriteIndex(repo.Tag(version), idx, opts...); err != nil {
			return Pushed{}, fmt.Errorf("pushing the image index: %w", err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return Pushed{}, err
		}
		for _, pd := range im.Manifests {
			if pd.Platform != nil {
				pushed.Platforms[pd.Platform.Architecture] = pd.Digest
			}
		}
		pushed.Index = d.Digest
	}
	if pushed.Index == (v1.Hash{}) {
		return Pushed{}, fmt.Errorf("%s holds no image index named %s", filepath.Clean(dir), version)
	}
	for _, d := range m.Manifests {
		if d.ArtifactType != sbomMediaType {
			continue
		}
		img, err := top.Image(d.Digest)
		if err != nil {
			return Pushed{}, err
		}
		if err := remote.Write(repo.Digest(d.Digest.String()), img, opts...); err != nil {
			return Pushed{}, fmt.Errorf("pushing the SBOM %s: %w", d.Digest, err)
		}
	}
	return pushed, nil
}
