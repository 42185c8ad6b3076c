// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

// Package objects reads the project's manifests as the tests apply them: a kustomization built
// with the kustomize Go API (the release the Makefile pins), or any renderer's YAML output.
package objects

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// FromKustomization builds the kustomization in dir, as `kustomize build` does, and returns its
// objects in their rendered order.
func FromKustomization(dir string) ([]*unstructured.Unstructured, error) {
	resMap, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", dir, err)
	}
	data, err := resMap.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("writing %s's objects: %w", dir, err)
	}
	return Decode(data)
}

// Decode reads the objects of a YAML stream, as a renderer writes it.
func Decode(data []byte) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		obj := &unstructured.Unstructured{}
		if err := decoder.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return objs, nil
		} else if err != nil {
			return nil, fmt.Errorf("decoding rendered objects: %w", err)
		}
		if len(obj.Object) > 0 {
			objs = append(objs, obj)
		}
	}
}

// AsOldRenders returns policy with the settings that kustomize before v5.8 left in it when
// config/ selected by name patterns: placeholders that were valid CEL strings. The agent is still
// judged (its role's grant was left as a placeholder too), and its retaint-after is no duration,
// so the policy refuses each of its requests.
func AsOldRenders(policy *admissionv1.ValidatingAdmissionPolicy) *admissionv1.ValidatingAdmissionPolicy {
	broken := policy.DeepCopy()
	old := map[string]string{"taintList": "'TAINTS'", "retaintAfter": "'RETAINTAFTER'", "conditionType": "'CONDITIONTYPE'"}
	for i, v := range broken.Spec.Variables {
		if expr, ok := old[v.Name]; ok {
			broken.Spec.Variables[i].Expression = expr
		}
	}
	return broken
}
