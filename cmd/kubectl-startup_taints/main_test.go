// Copyright 2026 The startup-taint-remover Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/startup-taint-remover/startup-taint-remover/test/fakecsi"
	"github.com/startup-taint-remover/startup-taint-remover/test/objects"
	"github.com/startup-taint-remover/startup-taint-remover/test/testkit"
)

const driverName = "ebs.csi.aws.com"

// cluster is an envtest API server with config/default installed, and the agent binary.
type cluster struct {
	t          *testing.T
	env        *envtest.Environment
	c          client.Client
	kubeconfig string
	agent      string
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env, c := testkit.StartEnvtest(t)
	// The agent is built in its own module, whose go.sum covers everything it links; this
	// module's covers only what the plugin and its tests import.
	agent := filepath.Join(t.TempDir(), "startup-taint-remover")
	build := exec.Command("go", "build", "-o", agent, "./cmd")
	build.Dir = filepath.Join("..", "..")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the agent: %v\n%s", err, out)
	}
	cl := &cluster{t: t, env: env, c: c, agent: agent}
	cl.kubeconfig = cl.user("admin", "system:masters")
	return cl
}

// user writes a kubeconfig for a user in groups.
func (cl *cluster) user(name string, groups ...string) string {
	cl.t.Helper()
	path := filepath.Join(cl.t.TempDir(), name+".kubeconfig")
	if err := testkit.WriteKubeconfig(cl.env, envtest.User{Name: name, Groups: groups}, path); err != nil {
		cl.t.Fatal(err)
	}
	return path
}

// install applies config/default, as a user does.
func (cl *cluster) install(ctx context.Context) {
	cl.t.Helper()
	objs, err := objects.FromKustomization("../../config/default")
	if err != nil {
		cl.t.Fatal(err)
	}
	for _, o := range objs {
		if err := cl.c.Create(ctx, o); err != nil {
			cl.t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// node creates a Node with the startup taint and labels, its driver registered in CSINode, and
// runs a test driver and the agent binary for it with extra flags, until the test ends.
func (cl *cluster) node(ctx context.Context, name string, labels map[string]string, readiness fakecsi.Readiness,
	flags ...string) *fakecsi.Driver {
	cl.t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: driverName + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute}}}}
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driverName, NodeID: name}}}}
	for _, o := range []client.Object{node, csiNode} {
		if err := cl.c.Create(ctx, o); err != nil {
			cl.t.Fatal(err)
		}
	}
	driver, err := fakecsi.Start(filepath.Join(cl.t.TempDir(), "csi.sock"), driverName, readiness)
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(driver.Stop)
	args := append([]string{"--kubeconfig=" + cl.kubeconfig, testkit.Unconfined, "--node-name=" + name, "--csi-address=" + driver.Path(),
		"--metrics-bind-address=0", "--health-probe-bind-address=0", "--probe-interval=100ms"}, flags...)
	logs, err := os.Create(filepath.Join(cl.t.TempDir(), name+".log"))
	if err != nil {
		cl.t.Fatal(err)
	}
	session, err := gexec.Start(exec.Command(cl.agent, args...), logs, logs)
	if err != nil {
		cl.t.Fatal(err)
	}
	cl.t.Cleanup(func() {
		select {
		case <-session.Kill().Exited:
		case <-time.After(10 * time.Second):
		}
	})
	return driver
}

// plugin runs the plugin with kubeconfig and args, and returns its status, output and errors.
func (cl *cluster) plugin(kubeconfig string, args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	status := run(context.Background(), append([]string{"--kubeconfig=" + kubeconfig}, args...), &stdout, &stderr)
	return status, stdout.String(), stderr.String()
}

// rows runs the plugin with -o json and args, and returns its rows by NODE/TAINT.
func (cl *cluster) rows(g Gomega, args ...string) map[string]Row {
	status, out, errs := cl.plugin(cl.kubeconfig, append([]string{"-o", "json"}, args...)...)
	g.Expect(status).To(BeZero(), errs)
	var r report
	g.Expect(json.Unmarshal([]byte(out), &r)).To(Succeed())
	byKey := map[string]Row{}
	for _, row := range r.Rows {
		byKey[row.Node+"/"+row.Taint] = row
	}
	return byKey
}

func TestThePluginShowsEachNodesStartupTaintsAsTheAgentsLeaveThem(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(30 * time.Second)
	ctx := context.Background()
	cl := startCluster(t)

	status, _, errs := cl.plugin(cl.kubeconfig)
	g.Expect(status).To(Equal(1))
	g.Expect(errs).To(ContainSubstring("no install of the startup-taint-remover in this cluster"))
	status, _, errs = cl.plugin(cl.user("nobody"))
	g.Expect(status).To(Equal(1))
	g.Expect(errs).To(ContainSubstring("you may not list ClusterRoles"))
	status, _, errs = cl.plugin(cl.kubeconfig, "-o", "yaml")
	g.Expect(status).To(Equal(exitUsage))
	g.Expect(errs).To(Equal("error: --output: \"yaml\" is not wide or json\n"))

	cl.install(ctx)
	reader := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "roles-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "startup-taint-remover-metrics-reader"},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "User", Name: "roles-only"}}}
	roles := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "roles-only"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, Verbs: []string{"list"}}}}
	reader.RoleRef.Name = roles.Name
	g.Expect(cl.c.Create(ctx, roles)).To(Succeed())
	g.Expect(cl.c.Create(ctx, reader)).To(Succeed())
	rolesOnly := cl.user("roles-only")
	g.Eventually(func() string { _, _, errs := cl.plugin(rolesOnly); return errs }).
		Should(ContainSubstring("you may not list Nodes"))

	taint := driverName + "/agent-not-ready:NoExecute"
	pool := map[string]string{"pool": "storage"}
	cl.node(ctx, "waiting", pool, fakecsi.NotReady)
	cl.node(ctx, "waiting-condition", pool, fakecsi.NotReady, "--condition-type=example.com/AgentReady")
	cl.node(ctx, "done", pool, fakecsi.Ready)
	cl.node(ctx, "forced", nil, fakecsi.NotReady, "--max-wait=1s")
	putBack := cl.node(ctx, "put-back", nil, fakecsi.Ready, "--retaint-after=1s", "--taint="+driverName+"/agent-not-ready")
	cl.node(ctx, "again", nil, fakecsi.Ready)

	g.Eventually(func(g Gomega) {
		rows := cl.rows(g, "--all")
		g.Expect(rows).To(HaveKeyWithValue("done/"+driverName+"/agent-not-ready", HaveField("State", StateRemoved)))
		g.Expect(rows).To(HaveKeyWithValue("again/"+driverName+"/agent-not-ready", HaveField("State", StateRemoved)))
		g.Expect(rows).To(HaveKeyWithValue("put-back/"+driverName+"/agent-not-ready", HaveField("State", StateRemoved)))
	}).Should(Succeed())
	putBack.SetReadiness(fakecsi.NotReady)
	node := &corev1.Node{}
	g.Expect(cl.c.Get(ctx, client.ObjectKey{Name: "again"}, node)).To(Succeed())
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: driverName + "/agent-not-ready", Effect: corev1.TaintEffectNoExecute})
	g.Expect(cl.c.Update(ctx, node)).To(Succeed())

	g.Eventually(func(g Gomega) {
		rows := cl.rows(g, "--all")
		g.Expect(rows).To(HaveKeyWithValue("waiting/"+taint, And(HaveField("State", StateHeld), HaveField("Gate", "csi"),
			HaveField("Since", Not(BeNil())), HaveField("Detail", ContainSubstring("Holding startup taints: csi gate")),
			HaveField("Install", "startup-taint-remover-manager-role"))))
		g.Expect(rows).To(HaveKeyWithValue("waiting-condition/"+taint, And(HaveField("State", StateHeld), HaveField("Gate", "csi"),
			HaveField("Detail", HavePrefix("CSINotReady: The csi gate does not pass")))))
		g.Expect(rows).To(HaveKeyWithValue("forced/"+driverName+"/agent-not-ready", And(HaveField("State", StateForced),
			HaveField("Since", Not(BeNil())))))
		g.Expect(rows).To(HaveKeyWithValue("put-back/"+driverName+"/agent-not-ready:NoSchedule", And(HaveField("State", StatePutBack),
			HaveField("Since", Not(BeNil())), HaveField("Gate", "csi"), HaveField("Detail", HavePrefix("Put startup taint")))))
		g.Expect(rows).To(HaveKeyWithValue("done/"+driverName+"/agent-not-ready", And(HaveField("State", StateRemoved),
			HaveField("Since", Not(BeNil())), HaveField("Detail", ContainSubstring("Removed startup taints")))))
	}).Should(Succeed())
	// "again" is held again once its agent sees the taint; it removes it again at once, so
	// either state is the truth of a moment.
	g.Expect(cl.rows(g, "--all")).To(HaveKey(HavePrefix("again/")))

	t.Log("without --all, only the held taints; -l narrows to a pool")
	held := cl.rows(g)
	for key, r := range held {
		g.Expect(r.State).NotTo(BeElementOf(StateRemoved, StateForced), key)
	}
	g.Expect(held).To(HaveKey("waiting/" + taint))
	g.Expect(held).NotTo(HaveKey("done/" + driverName + "/agent-not-ready"))
	pooled := cl.rows(g, "-l", "pool=storage", "--all")
	g.Expect(pooled).To(HaveLen(3))

	t.Log("the table, wide, and the summary")
	status, out, errs := cl.plugin(cl.kubeconfig, "-o", "wide", "--all", "-l", "pool=storage")
	g.Expect(status).To(BeZero(), errs)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(lines[0]).To(MatchRegexp(`^NODE\s+TAINT\s+STATE\s+SINCE\s+GATE\s+INSTALL\s+DETAIL$`))
	g.Expect(lines).To(HaveLen(6))
	g.Expect(lines[5]).To(Equal("CSIDriver ebs.csi.aws.com: none in the cluster; the startup taint is what keeps pods off its nodes."))
	g.Expect(lines[4]).To(Equal("2 of 3 nodes hold a startup taint (waiting: 2 on csi; the longest for " +
		strings.Fields(lines[2])[3] + "); 1 done."))
	fmt.Println(out)
	t.Log("the CSIDriver, once it sets preventPodSchedulingIfMissing")
	prevent := true
	g.Expect(cl.c.Create(ctx, &storagev1.CSIDriver{ObjectMeta: metav1.ObjectMeta{Name: driverName},
		Spec: storagev1.CSIDriverSpec{PreventPodSchedulingIfMissing: &prevent}})).To(Succeed())
	status, out, _ = cl.plugin(cl.kubeconfig, "-l", "pool=storage")
	g.Expect(status).To(BeZero())
	g.Expect(out).To(HaveSuffix("CSIDriver ebs.csi.aws.com: preventPodSchedulingIfMissing is set; the scheduler also keeps pods with its " +
		"PVC-backed volumes off nodes whose CSINode lacks it (not inline volumes, nor the driver's health).\n"))
	status, out, _ = cl.plugin(cl.kubeconfig, "--all")
	g.Expect(status).To(BeZero())
	fmt.Println(out)
}
