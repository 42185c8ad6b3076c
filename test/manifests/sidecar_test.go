package manifests

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

var _ = Describe("the sidecar component", func() {
	It("adds the container to the driver's DaemonSet and confines the driver's service account", func(ctx SpecContext) {
		objs := render("../../config/samples/ebs-sidecar")
		const driverSA = "system:serviceaccount:kube-system:ebs-csi-node-sa"
		var sawDaemonSet, sawPolicy int
		for _, obj := range objs {
			// Everything it renders is valid for the API server (renamed, as the default install
			// in this API server already holds objects of the same names).
			check := obj.DeepCopy()
			check.SetName(obj.GetName() + "-sidecar-check")
			Expect(k8sClient.Create(ctx, check, client.DryRunAll)).To(Succeed(), "%s %s", obj.GetKind(), obj.GetName())
			switch obj.GetKind() {
			case "ServiceAccount":
				Expect(obj.GetName()).To(Equal("ebs-csi-node-sa"), "the sidecar brings no service account of its own")
			case "DaemonSet":
				ds := &appsv1.DaemonSet{}
				Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, ds)).To(Succeed())
				Expect(ds.Spec.Template.Spec.ServiceAccountName).To(Equal("ebs-csi-node-sa"))
				Expect(ds.Spec.Template.Spec.Containers).To(HaveLen(2))
				sidecar := ds.Spec.Template.Spec.Containers[1]
				Expect(sidecar.Name).To(Equal("startup-taint-remover"))
				Expect(sidecar.Args).To(ContainElements("--csi-address=/csi/csi.sock", "--taint=$(STARTUP_TAINTS)"))
				Expect(sidecar.VolumeMounts).To(ContainElement(HaveField("Name", "plugin-dir")))
				Expect(sidecar.Env).To(ContainElement(HaveField("ValueFrom.ConfigMapKeyRef.Name", "startup-taint-remover-params")))
				sawDaemonSet++
			case "ClusterRoleBinding":
				b := &rbacv1.ClusterRoleBinding{}
				Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, b)).To(Succeed())
				Expect(b.Subjects).To(ConsistOf(rbacv1.Subject{Kind: "ServiceAccount", Name: "ebs-csi-node-sa", Namespace: "kube-system"}))
			case "ValidatingAdmissionPolicy":
				Expect(obj.Object).To(HaveKeyWithValue("spec", HaveKeyWithValue("matchConditions",
					ContainElement(HaveKeyWithValue("expression", ContainSubstring("'"+driverSA+"'"))))))
				sawPolicy++
			}
		}
		Expect(sawDaemonSet).To(Equal(1))
		Expect(sawPolicy).To(Equal(1))
	})
})
