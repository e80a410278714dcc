# Entry points. The guest targets are self-contained: each installs what it
# needs (tests/vm/deps.sh) and caches the kernel under target/vm/.

.PHONY: demo test fmt-check lint unit bench bench-ipsets bench-ipvs vm-test vm-shell vm-kernel

# Crates whose kernel tests vm-test runs; empty means every workspace crate
# with a `kernel-tests` feature. VM_TEST_ARGS go to each test binary (a name
# filter, --nocapture, ...).
VM_TEST_PACKAGES ?=
VM_TEST_ARGS ?=

# Boots the real-kernel guest and runs examples/demo.rs there: pods from
# examples/cluster.yaml, the proxy on that file, traffic, then an edit.
demo:
	tests/vm/deps.sh
	cargo build --bin kube-ipvs-proxy --example demo
	cargo build -p testkit --bin testpod
	tests/vm/run target/debug/examples/demo

# Everything CI checks: formatting, lints, the host tests, then the
# real-kernel suite in the guest.
test: fmt-check lint unit vm-test

fmt-check:
	cargo fmt --all -- --check

# Kernel-test code is only compiled with the feature, so lint it too.
lint:
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy --workspace --all-targets --all-features -- -D warnings

unit:
	cargo test --workspace

# Benchmarks print their ratios against a baseline from the same run: the
# host ones (tracker, planning), then the proxy against the kernel tools
# in the guest (tests/vm/bench-guest.sh; BENCH_SERVICES, BENCH_REPS).
bench:
	cargo bench --bench tracker --bench proxier_plan
	tests/vm/bench-guest.sh

# Our ipset netlink path against `ipset restore`, 10,000 entries, on this
# kernel in a private network namespace (needs root and ipset).
bench-ipsets:
	cargo bench --bench ipsets

# ipvs-sys against ipvsadm -R / -Sn on the same rules, in the guest.
# BENCH_SERVICES (default 10000) x BENCH_DESTS (10); see
# ipvs-sys/examples/vs_ipvsadm.rs.
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
