// Package suite is Kubernetes' e2e test binary with only the network tests
// linked in. Upstream's own test main (k8s.io/kubernetes/test/e2e) cannot be
// built here: its apimachinery tests import k8s.io/sample-apiserver, which
// the Go module proxy refuses. The specs, the framework and its flags are
// upstream's; only the choice of test packages and the suite's pre-flight
// are ours.
//
//	go test -c -o e2e.test .   (in a module of suite/vX.Y.Z with this file)
package suite

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"

	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/config"
	e2edebug "k8s.io/kubernetes/test/e2e/framework/debug"
	e2enode "k8s.io/kubernetes/test/e2e/framework/node"
	e2epod "k8s.io/kubernetes/test/e2e/framework/pod"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2emanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	// -v and the other klog flags, as upstream's binary has them.
	_ "k8s.io/component-base/logs/testinit"

	// The framework as upstream's suite configures it: debug dumps on
	// failure, metrics gathering, node checks (and gomega's object
	// formatting, whose package moved: each release's format_test.go).
	_ "k8s.io/kubernetes/test/e2e/framework/debug/init"
	_ "k8s.io/kubernetes/test/e2e/framework/metrics/init"
	_ "k8s.io/kubernetes/test/e2e/framework/node/init"

	// The tests: every [sig-network] spec of upstream's suite lives in one
	// of these two (common/ holds the ones node conformance shares, the
	// Pod-to-Pod "Networking Granular Checks: Pods"). Upstream's suite
	// also has GCE-only ones under cloud/gcp.
	_ "k8s.io/kubernetes/test/e2e/common/network"
	_ "k8s.io/kubernetes/test/e2e/network"
)

func TestMain(m *testing.M) {
	// Test packages may declare options through the framework's config
	// registry; they only count once on the command line. None of the
	// network ones does in v1.34, but a newer version's could.
	config.CopyFlags(config.Flags, flag.CommandLine)
	framework.RegisterCommonFlags(flag.CommandLine)
	framework.RegisterClusterFlags(flag.CommandLine)
	showVersion := flag.Bool("version", false, "print the Kubernetes version the suite was built from and exit")
	flag.Parse()

	if *showVersion {
		fmt.Println(version.Get())
		os.Exit(0)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", flag.Args())
		os.Exit(2)
	}

	// Tests read their YAML from the repository's test/e2e/testing-manifests;
	// the binary carries a copy, so no checkout of Kubernetes is needed.
	testfiles.AddFileSource(e2emanifests.GetE2ETestingManifestsFS())
	// Handles --list-tests, --list-images and friends (and exits), and
	// fills in the provider and the client configuration.
	framework.AfterReadingAllFlags(&framework.TestContext)

	os.Exit(m.Run())
}

func TestE2E(t *testing.T) {
	logs.InitLogs()
	defer logs.FlushLogs()
	// InitLogs turns contextual logging off; the framework's per-test
	// loggers need it.
	klog.EnableContextualLogging(true)

	gomega.RegisterFailHandler(framework.Fail)
	suiteConfig, reporterConfig := framework.CreateGinkgoConfig()
	ginkgo.RunSpecs(t, "Kubernetes network e2e suite", suiteConfig, reporterConfig)
}

// preflight is what the network tests assume of the cluster before the first
// spec: every node schedulable, the system pods Running and Ready, and the
// number of nodes known, since many specs skip below two nodes. It runs on
// the first ginkgo process only; the node count it found is handed to every
// process, so that parallel processes do not see the "unknown" default.
type preflight struct {
	NumNodes int `json:"numNodes"`
}

var _ = ginkgo.SynchronizedBeforeSuite(func(ctx context.Context) []byte {
	c, err := framework.LoadClientset()
	framework.ExpectNoError(err, "loading the client configuration")

	timeouts := framework.NewTimeoutContext()
	framework.ExpectNoError(e2enode.WaitForAllNodesSchedulable(ctx, c, timeouts.NodeSchedulable))

	found := preflight{NumNodes: framework.TestContext.CloudConfig.NumNodes}
	if found.NumNodes == framework.DefaultNumNodes {
		nodes, err := e2enode.GetReadySchedulableNodes(ctx, c)
		framework.ExpectNoError(err)
		found.NumNodes = len(nodes.Items)
	}

	if err := e2epod.WaitForAlmostAllPodsReady(ctx, c, metav1.NamespaceSystem,
		framework.TestContext.MinStartupPods, framework.TestContext.AllowedNotReadyNodes,
		timeouts.SystemPodsStartup); err != nil {
		e2edebug.DumpAllNamespaceInfo(ctx, c, metav1.NamespaceSystem)
		framework.Failf("kube-system is not ready: %v", err)
	}

	framework.Logf("e2e suite %s, %d schedulable nodes", version.Get().GitVersion, found.NumNodes)
	if server, err := c.Discovery().ServerVersion(); err == nil {
		framework.Logf("kube-apiserver %s", server.GitVersion)
	}
	data, err := json.Marshal(found)
	framework.ExpectNoError(err)
	return data
}, func(ctx context.Context, data []byte) {
	var found preflight
	framework.ExpectNoError(json.Unmarshal(data, &found))
	framework.TestContext.CloudConfig.NumNodes = found.NumNodes
})
