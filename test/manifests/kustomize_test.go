// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

// placeholder matches what config/ holds until config/components/taints writes the settings in.
var placeholder = regexp.MustCompile(`(^|[^_A-Z])TAINTS|RETAINTAFTER|CONDITIONTYPE`)

// kustomizeRelease is a kustomize release that a tool users install with bundles: hack/kustomize
// builds each from its module file, whose first line says who bundles it.
type kustomizeRelease struct {
	version, bundledBy, binary string
}

var (
	kustomizeOnce     sync.Once
	kustomizeReleases []kustomizeRelease
	kustomizeErr      error
)

// releases returns every kustomize release of hack/kustomize, built once per machine (make test
// builds them first) into KUSTOMIZE_RELEASES, which make sets, or the same default as make's.
func releases() []kustomizeRelease {
	GinkgoHelper()
	kustomizeOnce.Do(func() {
		dir := os.Getenv("KUSTOMIZE_RELEASES")
		if dir == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				kustomizeErr = fmt.Errorf("finding the kustomize releases: set KUSTOMIZE_RELEASES: %w", err)
				return
			}
			dir = filepath.Join(home, ".local/share/startup-taint-remover/kustomize")
		}
		if out, err := exec.Command("../../hack/kustomize/build.sh", dir).CombinedOutput(); err != nil {
			kustomizeErr = fmt.Errorf("building the kustomize releases: %w: %s", err, out)
			return
		}
		mods, err := filepath.Glob("../../hack/kustomize/kustomize-v*.mod")
		if err != nil || len(mods) == 0 {
			kustomizeErr = fmt.Errorf("no module file in hack/kustomize: %v", err)
			return
		}
		for _, mod := range mods {
			data, err := os.ReadFile(mod)
			if err != nil {
				kustomizeErr = err
				return
			}
			first, _, _ := strings.Cut(string(data), "\n")
			version := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(mod), "kustomize-"), ".mod")
			kustomizeReleases = append(kustomizeReleases, kustomizeRelease{version: version,
				bundledBy: strings.TrimPrefix(first, "// Bundled by: "), binary: filepath.Join(dir, "kustomize-"+version)})
		}
		slices.SortFunc(kustomizeReleases, func(a, b kustomizeRelease) int { return compareVersions(a.version, b.version) })
	})
	Expect(kustomizeErr).NotTo(HaveOccurred())
	return kustomizeReleases
}

// compareVersions orders vX.Y.Z versions by their numbers.
func compareVersions(a, b string) int {
	var x, y [3]int
	_, _ = fmt.Sscanf(a, "v%d.%d.%d", &x[0], &x[1], &x[2])
	_, _ = fmt.Sscanf(b, "v%d.%d.%d", &y[0], &y[1], &y[2])
	return slices.Compare(x[:], y[:])
}

// buildWith renders the kustomization dir with a kustomize binary, as `kustomize build` (and
// `kubectl apply -k`) does.
func buildWith(binary, dir string) ([]*unstructured.Unstructured, error) {
	cmd := exec.Command(binary, "build", dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s build %s: %w: %s", filepath.Base(binary), dir, err, strings.TrimSpace(stderr.String()))
	}
	return objects.Decode(out)
}

// kustomizations lists every directory of the project that kustomize can build: every
// kustomization under config/ and this suite's testdata that is not a Component.
func kustomizations() []string {
	GinkgoHelper()
	var dirs []string
	for _, root := range []string{"../../config", "testdata"} {
		Expect(filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
				return err
			}
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			var k struct{ Kind string }
			if err := yaml.Unmarshal(data, &k); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if k.Kind != "Component" {
				dirs = append(dirs, filepath.Dir(path))
			}
			return nil
		})).To(Succeed())
	}
	return dirs
}

// objectKey names an object in a render.
func objectKey(o *unstructured.Unstructured) string {
	return o.GetAPIVersion() + " " + o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// differences compares a render with the pinned one, object by object, and says what differs.
func differences(pinned, got []*unstructured.Unstructured) []string {
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range got {
		byKey[objectKey(o)] = o
	}
	var diffs []string
	for _, want := range pinned {
		o, ok := byKey[objectKey(want)]
		delete(byKey, objectKey(want))
		switch {
		case !ok:
			diffs = append(diffs, "missing "+objectKey(want))
		case !equality.Semantic.DeepEqual(want.Object, o.Object):
			a, _ := yaml.Marshal(want.Object)
			b, _ := yaml.Marshal(o.Object)
			diffs = append(diffs, fmt.Sprintf("%s differs:\n--- pinned\n%s--- this version\n%s", objectKey(want), a, b))
		}
	}
	for key := range byKey {
		diffs = append(diffs, "extra "+key)
	}
	slices.Sort(diffs)
	return diffs
}

// pinnedKustomize is the kustomize release the Makefile pins (KUSTOMIZE_VERSION).
func pinnedKustomize() string {
	GinkgoHelper()
	makefile, err := os.ReadFile("../../Makefile")
	Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`(?m)^KUSTOMIZE_VERSION \?= (v\S+)$`).FindSubmatch(makefile)
	Expect(m).NotTo(BeNil(), "the Makefile pins KUSTOMIZE_VERSION")
	return string(m[1])
}

var _ = Describe("every kustomization, with every kustomize that users install with", func() {
	It("renders with the kustomize Go API of the release the Makefile pins", Label(testkit.RenderOnly), func() {
		api := func(modFile string) string {
			data, err := os.ReadFile(modFile)
			Expect(err).NotTo(HaveOccurred())
			m := regexp.MustCompile(`(?m)^\s*sigs\.k8s\.io/kustomize/api (v\S+)`).FindSubmatch(data)
			Expect(m).NotTo(BeNil(), "%s requires sigs.k8s.io/kustomize/api", modFile)
			return string(m[1])
		}
		Expect(api("../../go.mod")).To(Equal(api("../../hack/kustomize/kustomize-"+pinnedKustomize()+".mod")),
			"go.mod's sigs.k8s.io/kustomize/api is the pinned kustomize's")
	})

	It("renders the same objects as the pinned kustomize, and leaves no placeholder", Label(testkit.RenderOnly), func() {
		dirs := kustomizations()
		// The bases (config/policy, config/manager, ...) hold the placeholders; every install
		// renders them away.
		installed := map[string]bool{}
		for _, in := range allInstalls() {
			installed[in.dir] = in.chart == nil
		}
		for _, in := range unjudgedInstalls {
			installed[in.dir] = in.chart == nil
		}
		delete(installed, chartDir)
		for dir := range installed {
			Expect(dirs).To(ContainElement(dir))
		}
		var table strings.Builder
		fmt.Fprintf(&table, "%-48s", "kustomization")
		for _, r := range releases() {
			fmt.Fprintf(&table, " %-7s", r.version)
		}
		table.WriteString("\n")
		var failures []string
		for _, dir := range dirs {
			pinned := render(dir)
			for _, obj := range pinned {
				data, err := yaml.Marshal(obj.Object)
				Expect(err).NotTo(HaveOccurred())
				if installed[dir] {
					Expect(placeholder.Match(data)).To(BeFalse(), "a placeholder left in %s %s", dir, objectKey(obj))
				}
			}
			fmt.Fprintf(&table, "%-48s", strings.TrimPrefix(dir, "../../"))
			for _, r := range releases() {
				objs, err := buildWith(r.binary, dir)
				verdict := "same"
				switch diffs := differences(pinned, objs); {
				case err != nil:
					verdict = "error"
					failures = append(failures, err.Error())
				case len(diffs) > 0:
					verdict = "DIFFERS"
					failures = append(failures, fmt.Sprintf("kustomize %s renders %s differently: %s", r.version, dir, strings.Join(diffs, "\n")))
				}
				fmt.Fprintf(&table, " %-7s", verdict)
			}
			table.WriteString("\n")
		}
		for _, r := range releases() {
			fmt.Fprintf(&table, "%s: %s\n", r.version, r.bundledBy)
		}
		AddReportEntry("kustomize versions", table.String(), ReportEntryVisibilityAlways)
		Expect(failures).To(BeEmpty(), table.String())
	})

	It("fails loudly where a renderer leaves the placeholders: the API server refuses the policies", func(ctx SpecContext) {
		policies := only[admissionv1.ValidatingAdmissionPolicy](render("../../config/policy"), "ValidatingAdmissionPolicy")
		Expect(policies).To(HaveLen(2))
		for _, p := range policies {
			err := k8sClient.Create(ctx, p, client.DryRunAll)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%s: want the policy refused as invalid, got %v", p.Name, err)
			Expect(err.Error()).To(ContainSubstring("compilation failed"), p.Name)
			Expect(err.Error()).To(ContainSubstring(`\\TAINTS`), p.Name)
		}
	})

	It("renders each GitOps sample's path with every kustomize release its tool bundles, as the pinned one does", Label(testkit.RenderOnly), func() {
		samples, err := filepath.Glob("../../config/gitops/*.yaml")
		Expect(err).NotTo(HaveOccurred())
		Expect(samples).To(HaveLen(2), "an Argo CD Application and a Flux Kustomization")
		for _, sample := range samples {
			data, err := os.ReadFile(sample)
			Expect(err).NotTo(HaveOccurred())
			objs, err := objects.Decode(data)
			Expect(err).NotTo(HaveOccurred())
			var tool, path, image string
			for _, o := range objs {
				switch o.GetKind() {
				case "Application":
					tool = "Argo CD"
					path, _, _ = unstructured.NestedString(o.Object, "spec", "source", "path")
					images, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "source", "kustomize", "images")
					Expect(images).To(HaveLen(1), sample)
					image, _, _ = strings.Cut(images[0], "=")
				case "Kustomization":
					tool = "Flux"
					path, _, _ = unstructured.NestedString(o.Object, "spec", "path")
					images, _, _ := unstructured.NestedSlice(o.Object, "spec", "images")
					Expect(images).To(HaveLen(1), sample)
					image, _, _ = unstructured.NestedString(images[0].(map[string]any), "name")
				}
			}
			Expect(tool).NotTo(BeEmpty(), "%s holds an Argo CD Application or a Flux Kustomization", sample)
			dir := filepath.Join("../..", path)
			pinned := render(dir)
			daemonSets := only[appsv1.DaemonSet](pinned, "DaemonSet")
			Expect(daemonSets).To(HaveLen(1))
			Expect(daemonSets[0].Spec.Template.Spec.Containers[0].Image).To(HavePrefix(image+":"),
				"%s's image override names the image %s renders", sample, path)
			bundled := 0
			for _, r := range releases() {
				if !strings.Contains(r.bundledBy, tool+" ") {
					continue
				}
				bundled++
				objs, err := buildWith(r.binary, dir)
				Expect(err).NotTo(HaveOccurred())
				Expect(differences(pinned, objs)).To(BeEmpty(), "%s's kustomize %s renders %s", tool, r.version, path)
				AddReportEntry("GitOps sample", fmt.Sprintf("%s: %s with kustomize %s: same", filepath.Base(sample), path, r.version))
			}
			Expect(bundled).NotTo(BeZero(), "hack/kustomize builds no release %s bundles", tool)
		}
	})
})
