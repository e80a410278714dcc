# Entry points. The guest targets are self-contained: each installs what it
# needs (tests/vm/deps.sh) and caches the kernel under target/vm/.

.PHONY: test vm-test vm-shell vm-kernel

# Crates whose kernel tests vm-test runs; empty means every workspace crate
# with a `kernel-tests` feature. VM_TEST_ARGS go to each test binary (a name
# filter, --nocapture, ...).
VM_TEST_PACKAGES ?=
VM_TEST_ARGS ?=

test: vm-test

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
