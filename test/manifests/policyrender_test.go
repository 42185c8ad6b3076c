// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// admissionKinds are the kinds whose specs an API server compiles and evaluates: what a minor of
// Kubernetes can judge differently.
var admissionKinds = []string{
	"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
	"MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
}

// policyRenderKey is what an API server judges of an install: its admission policies' and
// bindings' specs, with the values the install names (its taints, its continuous mode, its
// condition type, its namespace and service account) written as their names, and whether each
// is set and how many groups it has kept, and their layout left out. Two installs with one key ask an API server to compile
// the same expressions and take the same branches.
func policyRenderKey(objs []*unstructured.Unstructured) (string, error) {
	values := map[string]string{}
	for _, obj := range objs {
		if obj.GetKind() != "DaemonSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			container, _ := c.(map[string]any)
			if container["name"] != "startup-taint-remover" {
				continue
			}
			env, _, _ := unstructured.NestedSlice(container, "env")
			for _, e := range env {
				pair, _ := e.(map[string]any)
				if name, value := fmt.Sprint(pair["name"]), fmt.Sprint(pair["value"]); value != "" && pair["value"] != nil {
					values[name] = value
				}
			}
			sa, _, _ := unstructured.NestedString(obj.Object, "spec", "template", "spec", "serviceAccountName")
			values["SERVICE_ACCOUNT"] = "system:serviceaccount:" + obj.GetNamespace() + ":" + sa
		}
	}
	if values["STARTUP_TAINTS"] == "" {
		return "", fmt.Errorf("no startup-taint-remover container with STARTUP_TAINTS")
	}
	var specs []string
	for _, obj := range objs {
		if !slices.Contains(admissionKinds, obj.GetKind()) {
			continue
		}
		spec := obj.DeepCopy().Object["spec"]
		if m, ok := spec.(map[string]any); ok {
			delete(m, "policyName") // a binding's, the install's own name
		}
		data, err := json.Marshal(spec)
		if err != nil {
			return "", err
		}
		// Layout is not judged: kustomize re-emits a folded expression with more line breaks.
		specs = append(specs, obj.GetKind()+" "+layout.ReplaceAllString(string(data), " "))
	}
	slices.Sort(specs)
	key := strings.Join(specs, "\n")
	// The longest value first, so that no value is replaced inside a longer one.
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	slices.SortFunc(names, func(a, b string) int { return len(values[b]) - len(values[a]) })
	for _, name := range names {
		key = strings.ReplaceAll(key, values[name], `\`+name)
	}
	return fmt.Sprintf("groups=%d\n%s", strings.Count(values["STARTUP_TAINTS"], ";")+1, key), nil
}

// renderTable renders each install of table without failing, for the spec tree's labels: a render
// that fails has no key, and its own specs fail.
func renderTable(table []install) [][]*unstructured.Unstructured {
	out := make([][]*unstructured.Unstructured, len(table))
	for i, in := range table {
		if in.chart != nil {
			out[i], _ = in.chart.tryRender(in.dir)
		} else {
			out[i], _ = objects.FromKustomization(in.dir)
		}
	}
	return out
}

// policyRenderLabels labels each install of table SamePolicyRender whose policyRenderKey an
// earlier install of the table has: make test-minor runs the first install of each key only.
func policyRenderLabels(table []install) []Labels {
	out := make([]Labels, len(table))
	first := map[string]string{}
	for i, objs := range renderTable(table) {
		key, err := policyRenderKey(objs)
		if err != nil {
			continue
		}
		if _, seen := first[key]; seen {
			out[i] = Label(testkit.SamePolicyRender)
			continue
		}
		first[key] = table[i].name
	}
	return out
}

var _ = Describe("the installs an older minor runs", Label(testkit.RenderOnly), func() {
	It("are one per distinct policy render, telling a changed expression and another group count apart", func() {
		objs := render("../../config/default")
		key, err := policyRenderKey(objs)
		Expect(err).NotTo(HaveOccurred())
		Expect(key).NotTo(ContainSubstring("startup-taint-remover-system"), "the install's own names are written as names")
		taints := agentOf(objs).taintList

		// keyWith is the key of the render with old replaced by new in every string, as a render
		// with another value would have it.
		keyWith := func(old, new string) string {
			GinkgoHelper()
			data, err := json.Marshal(objs)
			Expect(err).NotTo(HaveOccurred())
			var changed []*unstructured.Unstructured
			Expect(json.Unmarshal([]byte(strings.ReplaceAll(string(data), old, new)), &changed)).To(Succeed())
			k, err := policyRenderKey(changed)
			Expect(err).NotTo(HaveOccurred())
			return k
		}
		Expect(keyWith("startsWith(", "endsWith(")).NotTo(Equal(key), "an expression changed")
		Expect(keyWith(taints, "example.com/renamed")).To(Equal(key), "another taint")
		Expect(keyWith(taints, taints+";example.com/second")).NotTo(Equal(key), "two groups")

		labels := policyRenderLabels(installs)
		var distinct []string
		for i, l := range labels {
			if !slices.Contains(l, testkit.SamePolicyRender) {
				distinct = append(distinct, installs[i].name)
			}
		}
		AddReportEntry("installs with a distinct policy render", strings.Join(distinct, "\n"), ReportEntryVisibilityAlways)
		Expect(distinct).To(ContainElement("config/default"))
		Expect(len(distinct)).To(BeNumerically("<", len(installs)), "some installs share a render")
	})
})
