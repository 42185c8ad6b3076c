// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/cli"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	"helm.sh/helm/v4/pkg/registry"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
)

// mergeValues reads the values files and --set pairs as helm does.
func mergeValues(files, sets []string) (map[string]any, error) {
	opts := values.Options{ValueFiles: files, Values: sets}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		return nil, fmt.Errorf("reading values: %w", err)
	}
	return vals, nil
}

// Lint lints the chart in dir with the values, as `helm lint --strict` does: warnings fail too.
func Lint(dir string, files, sets []string) error {
	vals, err := mergeValues(files, sets)
	if err != nil {
		return err
	}
	l := action.NewLint()
	l.Strict = true
	res := l.Run([]string{dir}, vals)
	var problems []string
	for _, m := range res.Messages {
		if m.Severity >= support.WarningSev {
			problems = append(problems, m.Error())
		}
	}
	for _, err := range res.Errors {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", errLint, strings.Join(problems, "; "))
	}
	return nil
}

// KubeVersion is the Kubernetes version charts are rendered for: the envtest control plane's.
const KubeVersion = "v1.37.2"

// Template renders the chart in dir as release name in namespace, as `helm template` does,
// validating the values against the chart's schema, for KubeVersion.
func Template(dir, name, namespace string, files, sets []string) (string, error) {
	return TemplateFor(KubeVersion, dir, name, namespace, files, sets)
}

// TemplateFor renders the chart as Template does, for a cluster of kubeVersion: Helm refuses a
// chart whose kubeVersion that version does not meet, as helm install does.
func TemplateFor(kubeVersion, dir, name, namespace string, files, sets []string) (string, error) {
	return templateFrom(kubeVersion, dir, Registry{}, name, namespace, files, sets)
}

// Registry says how to pull a chart named oci://...: the chart version, and whether the registry
// speaks plain HTTP (a test's, on loopback).
type Registry struct {
	ChartVersion string
	PlainHTTP    bool
}

// templateFrom renders the chart at dir, a directory, an archive or an oci:// reference, which
// Helm's own downloader pulls as helm template does.
func templateFrom(kubeVersion, dir string, reg Registry, name, namespace string, files, sets []string) (string, error) {
	install := action.NewInstall(action.NewConfiguration())
	if registry.IsOCI(dir) {
		client, err := registryClient(reg.PlainHTTP)
		if err != nil {
			return "", err
		}
		install.SetRegistryClient(client)
		install.Version, install.PlainHTTP = reg.ChartVersion, reg.PlainHTTP
		if dir, err = install.LocateChart(dir, cli.New()); err != nil {
			return "", fmt.Errorf("pulling the chart: %w", err)
		}
	}
	chrt, err := loader.Load(dir)
	if err != nil {
		return "", fmt.Errorf("loading %s: %w", dir, err)
	}
	vals, err := mergeValues(files, sets)
	if err != nil {
		return "", err
	}
	install.DryRunStrategy = action.DryRunClient
	install.ReleaseName, install.Namespace, install.Replace = name, namespace, true
	if install.KubeVersion, err = common.ParseKubeVersion(kubeVersion); err != nil {
		return "", fmt.Errorf("parsing %s: %w", kubeVersion, err)
	}
	rel, err := install.RunWithContext(context.Background(), chrt, vals)
	if err != nil {
		return "", fmt.Errorf("rendering %s: %w", dir, err)
	}
	r, ok := rel.(*releasev1.Release)
	if !ok {
		return "", errors.New("rendering: the SDK returned an unknown release type")
	}
	return r.Manifest + "\n", nil
}

// Package writes the chart in dir into destination as a release's archive and returns its path:
// version (vX.Y.Z) is the appVersion and so the default image tag, the chart's version is the
// same without the v, image is the repository its values point at and digest, where set, the
// image index its values pin.
func Package(dir, version, image, digest, destination string) (string, error) {
	chrt, err := loader.Load(dir)
	if err != nil {
		return "", fmt.Errorf("loading %s: %w", dir, err)
	}
	chrt.Metadata.Version, chrt.Metadata.AppVersion = strings.TrimPrefix(version, "v"), version
	if err := chrt.Validate(); err != nil {
		return "", fmt.Errorf("version %s: %w", version, err)
	}
	for field, value := range map[string]string{"repository": image, "digest": digest} {
		if value == "" {
			continue
		}
		line := regexp.MustCompile(`(?m)^(  ` + field + `: ).*$`)
		for _, f := range chrt.Raw {
			if f.Name == chartutil.ValuesfileName {
				f.Data = line.ReplaceAll(f.Data, []byte("${1}"+value))
			}
		}
	}
	path, err := chartutil.Save(chrt, destination)
	if err != nil {
		return "", fmt.Errorf("packaging %s: %w", dir, err)
	}
	return path, nil
}

// registryClient is Helm's OCI registry client, with no credentials store but the user's.
func registryClient(plainHTTP bool) (*registry.Client, error) {
	opts := []registry.ClientOption{registry.ClientOptWriter(io.Discard)}
	if plainHTTP {
		opts = append(opts, registry.ClientOptPlainHTTP())
	}
	client, err := registry.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("the registry client: %w", err)
	}
	return client, nil
}

// Push uploads a packaged chart to an OCI repository (oci://HOST/PATH), as helm push does, under
// the chart's name and version, and returns the pushed manifest's digest.
func Push(archive, repository string, plainHTTP bool) (string, error) {
	chrt, err := loader.Load(archive)
	if err != nil {
		return "", fmt.Errorf("loading %s: %w", archive, err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		return "", err
	}
	client, err := registryClient(plainHTTP)
	if err != nil {
		return "", err
	}
	ref := strings.TrimPrefix(strings.TrimSuffix(repository, "/"), "oci://") + "/" + chrt.Metadata.Name + ":" + chrt.Metadata.Version
	res, err := client.Push(data, ref)
	if err != nil {
		return "", fmt.Errorf("pushing to %s: %w", ref, err)
	}
	return res.Manifest.Digest, nil
}
