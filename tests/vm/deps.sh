#!/usr/bin/env bash
# Installs the Debian packages the guest harness needs (and any named as
# arguments), only those missing, so a prepared machine never touches apt
# and installed packages are not upgraded. CI runs this as root on a fresh
# machine.
set -euo pipefail

#   tests/vm/deps.sh [PACKAGE...]          the guest's, and these
#   tests/vm/deps.sh --only PACKAGE...     these alone
if [[ ${1:-} == --only ]]; then
    shift
    packages=("$@")
else
    packages=(
        qemu-system-x86 busybox-static cpio kmod xz-utils
        ipvsadm ipset iptables iproute2 conntrack socat jq
        "$@"
    )
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
        grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
((${#missing[@]} == 0)) && exit 0

sudo=()
if ((EUID != 0)); then
    sudo=(sudo)
fi
echo "vm: installing ${missing[*]}" >&2
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    --no-install-recommends "${missing[@]}"
