# Entry points. The guest targets are self-contained: each installs what it
# needs (tests/vm/deps.sh) and caches the kernel under target/vm/.
#
# Every target that starts Kubernetes (e2e, e2e-k8s, e2e-control-plane,
# e2e-guest-smoke, conformance, conformance-random, node-e2e, k8s-e2e,
# k8s-e2e-compare, k8s-e2e-ci, chart-test, bench-vs-upstream,
# bench-split-vs-direct) runs the release K8S_VERSION names: v1.37.2 (the
# default), v1.36.3 or v1.35.4, any other refused with that list
# (tests/kubernetes/release.sh). Each release is built, cached and reported
# apart: $(E2E_K8S_DIR or target/k8s)/K8S_VERSION, target/k8s-e2e/K8S_VERSION.

.PHONY: e2e demo image test fmt-check lint dead-code unit bench bench-ipsets bench-ipvs bench-vs-upstream bench-split bench-api-side-attack vm-test vm-shell vm-kernel \
	e2e-k8s e2e-control-plane e2e-guest-smoke kind-e2e node-e2e conformance k8s-e2e k8s-e2e-compare k8s-e2e-ci k8s-e2e-chart k8s-e2e-migration \
	conformance-random fuzz chart-test

# Crates whose kernel tests vm-test runs; empty means every workspace crate
# with a `kernel-tests` feature. VM_TEST_ARGS go to each test binary (a name
# filter, --nocapture, ...).
VM_TEST_PACKAGES ?=
VM_TEST_ARGS ?=

# Boots the real-kernel guest and runs examples/demo.rs there: pods from
# examples/cluster.yaml, the proxy on that file, traffic, then an edit.
# ARCH=arm64 cross-compiles all three programs and boots an aarch64 guest
# (Debian's arm64 kernel, a root of Debian's arm64 packages) instead.
# DEMO_IMAGE=target/image/kube-ipvs-proxy.oci.tar runs the proxy binary of
# that archive's ARCH image (make image) rather than the one built here.
ARCH ?= amd64
DEMO_IMAGE ?=
demo:
	tests/vm/deps.sh
	dir=$$(deploy/image/cargo.sh $(ARCH) dev --bin kube-ipvs-proxy --example demo) && \
	deploy/image/cargo.sh $(ARCH) dev -p testkit --bin testpod >/dev/null && \
	if [ -n "$(DEMO_IMAGE)" ]; then \
		mkdir -p target/demo-image/$(ARCH) && \
		python3 deploy/image/check.py --extract "$(DEMO_IMAGE)" $(ARCH) \
			target/demo-image/$(ARCH)/kube-ipvs-proxy && \
		export DEMO_PROXY=$$PWD/target/demo-image/$(ARCH)/kube-ipvs-proxy VM_PASS_ENV=DEMO_PROXY; \
	fi && \
	VM_ARCH=$(ARCH) tests/vm/run "$${dir#$$PWD/}/examples/demo"

# deploy/Dockerfile's image for linux/amd64 and linux/arm64, in one OCI
# archive with an index of both (target/image/kube-ipvs-proxy.oci.tar),
# built without a registry and without running arm64 code: the binaries
# cross-compiled here, the Debian layer made from Debian's packages
# (deploy/image/build.sh). ARCH=amd64 or ARCH=arm64 builds only that one.
image:
	deploy/image/build.sh $(if $(filter command line environment,$(origin ARCH)),$(ARCH),amd64 arm64)

# Everything CI checks: formatting, lints, the host tests, then the
# real-kernel suite in the guest.
test: fmt-check lint unit vm-test

# cargo fmt follows `mod` items, and never sees the modules src/lib.rs
# declares through its macro: every tracked Rust file is checked as well.
fmt-check:
	cargo fmt --all -- --check
	rustfmt --check --edition 2021 $$(git ls-files '*.rs')

# Kernel-test code is only compiled with the feature, so lint it too.
# Doc links are checked too: ipvs-sys is meant to be published, and a
# link that no longer resolves is a comment that no longer says where.
lint: dead-code
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --workspace --all-targets --all-features -- -D warnings
	RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps

# The library with every module crate-private and the binary's main
# compiled inside it (src/lib.rs, `private_modules`): whatever neither
# uses is reported, and fails the build. What only tests and benches use
# is behind `cfg(test)` or the `test-support` feature.
dead-code:
	cargo rustc --lib --profile check -- --cfg private_modules -D warnings

unit:
	cargo test --workspace

# Every fuzz target (fuzz/, ipvs-sys/fuzz/) for FUZZ_SECONDS each, with
# cargo-fuzz on nightly; `make unit` replays the committed corpora.
fuzz:
	fuzz/run.sh

# Benchmarks print their ratios against a baseline from the same run: the
# host ones (tracker, planning, ipvs-sys's dump decode), then the proxy
# against the kernel tools in the guest (tests/vm/bench-guest.sh;
# BENCH_SERVICES, BENCH_REPS).
bench:
	cargo bench --bench tracker --bench proxier_plan
	cargo bench -p ipvs-sys --bench decode
	tests/vm/bench-guest.sh

# Our ipset netlink path against `ipset restore`, 10,000 entries, on this
# kernel in a private network namespace (needs root and ipset).
bench-ipsets:
	cargo bench --bench ipsets

# Upstream kube-proxy (IPVS mode) against ours, same objects, same guest,
# against the loopback control plane: cold sync, one endpoint
# change, one new service, a minute of churn, CPU and peak RSS, at
# BENCH_SIZES (1000 10000) services x 10 endpoints. Prints the table and
# writes it as CSV and PNG under target/bench/vs-upstream/
# (tests/vm/bench-vs-upstream.sh, benches/vs_upstream). Under TCG about
# 45 minutes on a 2-core AMD EPYC host, over two hours on a slower
# 2-core Intel one; most of it upstream's cold sync at 10,000 services.
bench-vs-upstream:
	tests/vm/bench-vs-upstream.sh

# The API/node split against N proxies that each watch the API server, at
# the real API server of a loopback control plane of its own:
# watches, bytes per change and node, the API server's and the API
# side's CPU and memory, write-to-every-node latency
# (tests/e2e/bench-split-vs-direct.sh, benches/split_vs_direct.rs).
# BENCH_SPLIT_SERVICES (10000), BENCH_SPLIT_NODES (100),
# BENCH_SPLIT_CHANGES (50).
bench-split-vs-direct:
	tests/e2e/bench-split-vs-direct.sh

# The API/node split at cluster scale: one API side (a child process)
# serving BENCH_SPLIT_SERVICES (10000) x 10 endpoints to BENCH_SPLIT_NODES
# (1000) simulated nodes in this process: cold start, steady churn at 10
# and 100 changes a second for BENCH_SPLIT_CHURN_SECONDS (30, and a third
# of it), and a reconnect storm; the API side's time, CPU, RSS and heap
# (benches/api_split.rs). Prints each figure as RESULT split N ... too.
bench-split:
	cargo bench --bench api_split

# The API side under misbehaving clients (floods of silent connections,
# stalled handshakes, refused certificates, oversized requests, nodes that
# never read), each from a child process: an honest node's first view and
# change latency, and the API side's CPU, heap and RSS, against no attack
# (benches/api_side_attack.rs). BENCH_ATTACK_SERVICES (10000),
# BENCH_ATTACK_ROUNDS (10), BENCH_ATTACK_RATE (320 a second).
bench-api-side-attack:
	cargo bench --bench api_side_attack

# ipvs-sys against ipvsadm -R / -Sn on the same rules, in the guest.
# BENCH_SERVICES (default 10000) x BENCH_DESTS (10); see
# ipvs-sys/benches/vs_ipvsadm.rs.
bench-ipvs:
	tests/vm/bench-ipvs.sh

# Builds the kernel tests and runs them in the real-kernel guest
# (tests/vm/README.md).
vm-test:
	tests/vm/run-tests.sh $(VM_TEST_PACKAGES) -- $(VM_TEST_ARGS)

# An interactive root shell in the guest, in this directory, with the
# modules loaded.
vm-shell:
	tests/vm/run --shell

# Fetches the kernel and builds the initramfs without booting (for caching
# in CI).
vm-kernel:
	tests/vm/prepare

# Upstream kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kube-proxy, kubelet and etcd of K8S_VERSION, built from the
# k8s.io/kubernetes Go module into target/k8s/K8S_VERSION/bin (the first
# build takes 10 to 20 minutes on 2 cores; then nothing).
e2e-k8s:
	tests/e2e/build-k8s.sh

# Everything against the real control plane (tests/e2e/control-plane.sh,
# upstream binaries built by build-k8s.sh on first use): its own check
# (e2e-control-plane's, on the control plane already started: the proxy's
# RBAC enough and no more, deploy/'s DaemonSet admitted), our EndpointSlice
# reconciler against the real controller (host), then the proxy in the
# real-kernel guest with deploy/'s ServiceAccount through guestfwd: a
# service following its pods (create, scale, readiness, delete), named
# ports over several slices, an API server outage, a restart under
# traffic, plan and list against the live API server
# (tests/cluster_e2e/guest_e2e.rs, the scenarios shared with kind-e2e). The control plane stops either way.
# One feature set for the host and the guest part, and for node-e2e, so the
# crate builds once; built before the control plane starts, whose
# processes hold the memory a link needs. GUEST_E2E_TESTS: how many tests
# the guest_e2e filter must run (those of tests/cluster_e2e/guest_e2e*):
# a filter that matches nothing passes too. Only cluster_e2e's binary
# goes to the guest: every other one would start there to run nothing.
E2E_FEATURES = kube-ipvs-proxy/kernel-tests,kube-ipvs-proxy/e2e-tests,kube-ipvs-proxy/node-tests
GUEST_E2E_TESTS = 7
e2e:
	tests/vm/deps.sh prometheus
	cargo test --no-run -p kube-ipvs-proxy --features $(E2E_FEATURES)
	tests/e2e/control-plane.sh start
	eval "$$(tests/e2e/control-plane.sh env)" && \
	tests/e2e/control-plane.sh check && \
	cargo test -p kube-ipvs-proxy --features $(E2E_FEATURES) \
		--test slices_vs_controller --test api_split_tokens --test api_protobuf && \
	VM_HOST_PORTS="$$E2E_VM_HOST_PORTS" \
	VM_PASS_ENV="E2E_PROXY_KUBECONFIG E2E_ADMIN_GUEST_KUBECONFIG E2E_CONTROL_PORT" \
	VM_TEST_FEATURES=kube-ipvs-proxy/e2e-tests,kube-ipvs-proxy/node-tests \
	VM_TEST_EXPECT=$(GUEST_E2E_TESTS) VM_TEST_TARGETS="--test cluster_e2e" \
	tests/vm/run-tests.sh kube-ipvs-proxy -- guest_e2e --nocapture; \
	rc=$$?; tests/e2e/control-plane.sh stop; exit $$rc

# The real-kernel guest as a real Kubernetes node (tests/node-e2e/run.sh):
# containerd, runc and the CNI bridge from Debian, a kubelet from
# build-k8s.sh registered with the loopback control plane; the images built
# here without a registry (ours from deploy/Dockerfile with buildah, upstream
# kube-proxy's, pause and testpod); deploy/ applied as a user applies it.
# Then the scenarios against real Pods (Deployments with a readiness probe),
# traffic from the node and from a Pod, the DaemonSet's Pod deleted and
# replaced, a rolling update and the migration from kube-proxy and back
# under steady traffic (0 failed requests required), the image on a legacy
# and an nft node. NODE_E2E_TESTS picks tests (names in run.sh). About 12
# minutes in the guest under TCG, after the release build for the image
# (about 6 minutes on 2 cores; NODE_E2E_PROFILE=dev puts the debug build
# in the image instead) and, the first time, the base image (about a
# minute). The control plane stops either way.
node-e2e:
	NODE_E2E_FEATURES=$(E2E_FEATURES) tests/node-e2e/run.sh

# The same scenarios (tests/cluster_e2e/scenarios.rs) on a kind cluster
# without kube-proxy, for users with Docker and kind: deploy/'s image and
# DaemonSet, real Pods, checks through kubectl and `docker exec` into the
# worker; the cluster is deleted either way (tests/e2e/kind.sh). Cannot
# run where images cannot be pulled.
kind-e2e:
	tests/e2e/kind.sh

# Side by side with upstream kube-proxy, in the guest
# against the real control plane: upstream's kube-proxy (IPVS mode) and
# ours live through the same scenario, one after the other, and the kernel
# snapshots are diffed after every step, less
# tests/conformance/differences.md (tests/conformance/run.sh). By default
# every scenario of tests/conformance/scenarios/ (static ones and ones with
# steps), a takeover and rollback under traffic for each scenario with a
# Traffic document, and one walk with SIGKILLs; SCENARIOS picks runs
# (names without .yaml, takeover-NAME, random-SEED, kill-SEED, random:N,
# kill:N). SPLIT=1 adds a third pass to each scenario and walk: ours fed
# by the API/node split, diffed against upstream like ours.
# The control plane stops either way.
SCENARIOS ?=
SPLIT ?=
conformance:
	tests/vm/deps.sh
	tests/e2e/control-plane.sh start
	CONFORMANCE_SPLIT=$(SPLIT) tests/conformance/run.sh $(SCENARIOS); \
	rc=$$?; tests/e2e/control-plane.sh stop; exit $$rc

# Seeded random walks against upstream: SEEDS=N walks on fresh seeds
# (printed), or SEED="S..." to replay given ones; STEPS per walk. KILLS=1
# makes them walks of KILL_STEPS steps in which ours is killed with SIGKILL
# at random moments and must converge to upstream's state each time.
SEEDS ?= 5
SEED ?=
STEPS ?= 30
KILLS ?=
KILL_STEPS ?= 60
WALK = $(if $(KILLS),kill,random)
conformance-random:
	tests/vm/deps.sh
	tests/e2e/control-plane.sh start
	CONFORMANCE_STEPS=$(STEPS) CONFORMANCE_KILL_STEPS=$(KILL_STEPS) \
	CONFORMANCE_SPLIT=$(SPLIT) tests/conformance/run.sh $(if $(SEED),$(addprefix $(WALK)-,$(SEED)),$(WALK):$(SEEDS)); \
	rc=$$?; tests/e2e/control-plane.sh stop; exit $$rc

# The real control plane on loopback, without a guest: applies deploy/
# (server-side dry run, then for real), checks that the EndpointSlice
# controller follows a Pod's status and that the proxy's RBAC is enough and
# no more, stops (tests/e2e/control-plane.sh).
e2e-control-plane:
	tests/e2e/control-plane.sh smoke

# The Helm chart (deploy/chart/kube-ipvs-proxy), so that it cannot drift
# from the plain manifests it mirrors: lint and render every profile of
# tests/chart/profiles/, hold the renderings to deploy/'s manifests, unit-test
# the alerts with promtool, then a server-side dry run of each against a
# loopback kube-apiserver (tests/chart/test.sh; helm and the upstream
# binaries are built on first use).
chart-test:
	tests/chart/test.sh

# The proxy in the real-kernel guest against that control plane, through
# guestfwd with its ServiceAccount's token: one Service, one ready Pod, the
# virtual server and real server it must program; the API server stopped
# (the kernel state stays) and back (a readiness change reaches the kernel).
e2e-guest-smoke:
	tests/vm/deps.sh
	cargo build --bin kube-ipvs-proxy
	tests/e2e/control-plane.sh start
	tests/e2e/guest-smoke.sh; rc=$$?; tests/e2e/control-plane.sh stop; exit $$rc

# Kubernetes' own [sig-network] e2e suite (k8s.io/kubernetes's e2e.test,
# the control plane's version) against one proxy on a fresh cluster of two
# real-kernel guests as worker nodes, the proxy installed as kubeadm
# installs kube-proxy, CoreDNS as cluster DNS (tests/k8s-e2e/run.sh).
# PROXY=ours|upstream; FOCUS and SKIP replace the default selection
# (upstream's IPVS job's, limited to networking). Results under
# target/k8s-e2e/K8S_VERSION/results/PROXY/; RESULT lines at the end.
# (FOCUS and SKIP given on make's command line reach the script through
# the environment.)
PROXY ?= ours
k8s-e2e:
	tests/k8s-e2e/run.sh $(PROXY)

# Both proxies, one fresh cluster each, and the table side by side:
# passed by both, upstream only, ours only, failed by both, skipped.
# K8S_E2E_SHARD=I/N runs shard I of both; the table covers every shard run
# so far and lists the tests only one side has run. K8S_E2E_PICK=releases
# (or a regex) runs only the tests that differ between releases and CI's
# five, with a shard too if given.
k8s-e2e-compare:
	tests/k8s-e2e/run.sh upstream
	tests/k8s-e2e/run.sh ours
	tests/k8s-e2e/run.sh compare

# CI's subset, against ours: four Services conformance-style tests and
# one that needs two nodes (externalTrafficPolicy=Local seen from the node
# without the endpoint). Every one must pass; only the images they run are
# built and imported.
export K8S_E2E_CI_FOCUS = \[sig-network\] Services should (serve a basic endpoint from pods|be able to create a functioning NodePort service|have session affinity work for service with type clusterIP|preserve source pod IP for traffic thru service cluster IP|support externalTrafficPolicy=Local for type=NodePort)
# docs/install.md's node-by-node migration from kube-proxy and back on the
# two-node cluster, under steady traffic from a Pod on each node to a
# ClusterIP and both node ports: no request may fail
# (tests/k8s-e2e/migrate.sh). About 15 minutes under TCG. With
# K8S_E2E_INSTALL=chart ours comes from the Helm chart (migration.nodeLabel).
k8s-e2e-migration:
	tests/k8s-e2e/migrate.sh

k8s-e2e-ci:
	K8S_E2E_IMAGES_ONLY="agnhost pause coredns" K8S_E2E_EXPECT=5 \
		K8S_E2E_TIMEOUT=20m FOCUS='$(K8S_E2E_CI_FOCUS)' tests/k8s-e2e/run.sh ours

# The same subset against ours as `helm install` puts it there with the
# chart's defaults (kubeadm's kube-proxy ConfigMap as the configuration).
# Run before a change to the chart lands; not in CI.
k8s-e2e-chart:
	K8S_E2E_INSTALL=chart $(MAKE) k8s-e2e-ci
