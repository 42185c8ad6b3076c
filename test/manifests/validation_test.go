// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"context"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/startup-taint-remover/startup-taint-remover/startuptaint"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// policyVariables returns the variables of the rendered policy kind/name, as written, up to and
// including the one named last.
func policyVariables(objs []*unstructured.Unstructured, kind, name, last string) []admissionv1.Variable {
	GinkgoHelper()
	for _, obj := range objs {
		if obj.GetKind() != kind || !strings.HasSuffix(obj.GetName(), name) {
			continue
		}
		raw, found, err := unstructured.NestedSlice(obj.Object, "spec", "variables")
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeTrue())
		var out []admissionv1.Variable
		for _, v := range raw {
			m := v.(map[string]any)
			out = append(out, admissionv1.Variable{Name: m["name"].(string), Expression: m["expression"].(string)})
			if m["name"] == last {
				return out
			}
		}
		Fail(fmt.Sprintf("%s %s has no variable %s", kind, name, last))
	}
	Fail(fmt.Sprintf("the render has no %s %s", kind, name))
	return nil
}

// Whether a taint key is valid is decided by Kubernetes' own validation wherever it is checked:
// the binary's parser calls k8s.io/apimachinery's IsQualifiedName, and the policies call it
// through CEL's format library. This runs the policies' own checks, as rendered, on the real API
// server over the parser's corpus, and fails on any disagreement with the parser.
var _ = Describe("taint keys", func() {
	It("are valid for the admission policy, the registration policy and the binary alike", func(ctx SpecContext) {
		objs := render("../../config/samples/ebs-taint-at-registration")
		// own-node-only's check of its settings, over a ConfigMap's taints instead of the rendered ones.
		vars := policyVariables(objs, "ValidatingAdmissionPolicy", "own-node-only", "settingsValid")
		for i, v := range vars {
			switch v.Name {
			case "taintList":
				vars[i].Expression = "object.data.taints"
			case "retaintAfter", "conditionType":
				vars[i].Expression = "''"
			}
		}
		// taint-at-registration's, renamed beside it.
		for _, v := range policyVariables(objs, "MutatingAdmissionPolicy", "taint-at-registration", "valid") {
			expr := strings.NewReplacer("variables.taintList", "variables.registrationTaintList",
				"variables.specs", "variables.registrationSpecs").Replace(v.Expression)
			if v.Name == "taintList" {
				expr = "object.data.taints"
			}
			vars = append(vars, admissionv1.Variable{Name: "registration" + strings.ToUpper(v.Name[:1]) + v.Name[1:], Expression: expr})
		}
		// Every ConfigMap named key-check-* is refused with both verdicts in the message.
		policy := &admissionv1.ValidatingAdmissionPolicy{
			ObjectMeta: metav1.ObjectMeta{Name: "taint-key-check"},
			Spec: admissionv1.ValidatingAdmissionPolicySpec{
				FailurePolicy: ptr.To(admissionv1.Fail),
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{Operations: []admissionv1.OperationType{admissionv1.Create},
						Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}}},
				MatchConditions: []admissionv1.MatchCondition{{Name: "key-check", Expression: "object.metadata.name.startsWith('key-check-')"}},
				Variables:       vars,
				Validations: []admissionv1.Validation{{Expression: "false",
					MessageExpression: "'admission=' + string(variables.settingsValid) + ' registration=' + string(variables.registrationValid)"}},
			},
		}
		Expect(k8sClient.Create(ctx, policy)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, policy)).To(Succeed()) })
		binding := &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "taint-key-check"},
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: policy.Name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny}}}
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(k8sClient.Delete(ctx, binding)).To(Succeed()) })

		verdicts := func(ctx context.Context, spec string) (string, error) {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "key-check-", Namespace: metav1.NamespaceDefault},
				Data: map[string]string{"taints": spec}}
			err := k8sClient.Create(ctx, cm, client.DryRunAll)
			if err == nil {
				return "", fmt.Errorf("the check admitted %q", spec)
			}
			msg := err.Error()
			i := strings.Index(msg, "admission=")
			if i < 0 {
				return "", err
			}
			return msg[i:], nil
		}
		Eventually(func() error { _, err := verdicts(ctx, "example.com/x"); return err }).Should(Succeed(), "the API server picks the check up")

		corpus, err := testkit.TaintSpecCorpus("../../startuptaint/testdata/taint-specs.txt")
		Expect(err).NotTo(HaveOccurred())
		checked := 0
		for _, spec := range corpus {
			// A list is split at commas and semicolons, and each item trimmed, before a key is checked.
			if strings.ContainsAny(spec, ",;") || strings.TrimSpace(spec) == "" && spec != "" {
				continue
			}
			_, parseErr := startuptaint.ParseTaintSpec(strings.TrimSpace(spec))
			want := fmt.Sprintf("admission=%t registration=%t", parseErr == nil, parseErr == nil)
			got, err := verdicts(ctx, spec)
			Expect(err).NotTo(HaveOccurred(), "%q", spec)
			Expect(got).To(Equal(want), "%q: the parser says %v", spec, parseErr)
			checked++
		}
		Expect(checked).To(BeNumerically(">=", 40), "the corpus reaches the policies")
	})
})
