# Shared by the guest harness scripts: where things live, which kernel, and
# how the kernel and initramfs are built. Source it; it defines functions only
# (plus the path variables below).

VM_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
VM_REPO=$(cd "$VM_SRC/../.." && pwd)

# The guest's architecture. amd64: this machine's root, shared read-only,
# is the guest's. arm64 (qemu-system-aarch64 -M virt under TCG): this
# machine's root holds x86-64 programs, so the guest's root is one made
# from Debian's arm64 packages (vm_prepare_arm64), with the repository
# shared at its own path beside it.
VM_ARCH=${VM_ARCH:-amd64}
case $VM_ARCH in
amd64 | arm64) ;;
*)
    echo "vm: error: VM_ARCH must be amd64 or arm64, not $VM_ARCH" >&2
    exit 1
    ;;
esac

# The cache follows cargo's target directory so a shared CARGO_TARGET_DIR
# also shares the kernel. It must not be under /tmp: the guest mounts a
# tmpfs there, which would hide it.
vm_cache_dir() {
    local target=${CARGO_TARGET_DIR:-$VM_REPO/target}
    case $target in
    /*) ;;
    *) target=$VM_REPO/$target ;;
    esac
    echo "${VM_CACHE:-$target/vm}"
}

vm_log() {
    echo "vm: $*" >&2
}

vm_die() {
    echo "vm: error: $*" >&2
    exit 1
}

# The kernel release that Debian's linux-image-amd64 depends on, e.g.
# 6.1.0-56-amd64. VM_KERNEL overrides it. Without apt lists (a fresh
# machine) it updates them once; offline, it falls back to the newest
# kernel already in the cache.
vm_kernel_release() {
    if [[ -n ${VM_KERNEL:-} ]]; then
        echo "$VM_KERNEL"
        return
    fi
    local dep
    dep=$(vm_apt_kernel_dep) || true
    if [[ -z $dep ]]; then
        vm_log "apt does not know linux-image-amd64; running apt-get update"
        apt-get update -qq >&2 || true
        dep=$(vm_apt_kernel_dep) || true
    fi
    if [[ -z $dep ]]; then
        local cached
        cached=$(ls -1 "$(vm_cache_dir)" 2>/dev/null | grep -- '-amd64$' |
            sort -V | tail -n 1) || true
        [[ -n $cached ]] ||
            vm_die "cannot resolve linux-image-amd64 and no kernel is cached"
        vm_log "apt cannot resolve linux-image-amd64; using cached $cached"
        echo "$cached"
        return
    fi
    echo "${dep#linux-image-}"
}

vm_apt_kernel_dep() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' |
        head -n 1
}

# The files an initramfs build depends on: changing any of them rebuilds it.
vm_initramfs_inputs_hash() {
    cat "$VM_SRC/init" "$VM_SRC/modules" "$VM_SRC/lib.sh" "$VM_BUSYBOX" |
        sha256sum | cut -c1-16
}

# What the arm64 guest's root holds: what the guest's tests and the demo
# run (the amd64 guest finds them on this machine's root, which
# tests/vm/deps.sh provides), and busybox for the initramfs.
VM_ARM64_PACKAGES=bash,iproute2,ipvsadm,ipset,iptables,conntrack,kmod,procps,busybox-static
VM_ARM64_MIRRORS=(
    "deb http://deb.debian.org/debian bookworm main"
    "deb http://deb.debian.org/debian bookworm-updates main"
    "deb http://deb.debian.org/debian-security bookworm-security main"
)

# The arm64 guest's root and kernel, made once from Debian's arm64
# packages without running any arm64 code: the userland by mmdebstrap in
# chrootless mode (maintainer scripts run by this machine's tools under
# DPKG_ROOT), the kernel package only unpacked, its modules indexed by
# this machine's depmod. Both go to VM_KDIR (VM_KDIR/root is the guest's
# root, its kernel's modules inside it).
vm_prepare_arm64() {
    local dir=$1 key
    key=$(printf '%s\n' "$VM_ARM64_PACKAGES" "${VM_ARM64_MIRRORS[@]}" | sha256sum | cut -c1-16)
    if [[ ! -f $dir/root.ok || $(cat "$dir/root.ok") != "$key" ]]; then
        "$VM_SRC/deps.sh" --only mmdebstrap
        rm -rf "$dir"
        mkdir -p "$dir"
        vm_log "making the arm64 guest's root from Debian's packages (mmdebstrap)"
        mmdebstrap --quiet --variant=minbase --mode=chrootless --arch=arm64 \
            --format=directory --include="$VM_ARM64_PACKAGES" \
            --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
            bookworm "$dir/root" "${VM_ARM64_MIRRORS[@]}" >&2
        vm_log "unpacking Debian's arm64 kernel"
        mmdebstrap --quiet --variant=extract --mode=chrootless --arch=arm64 \
            --format=directory --include=linux-image-arm64 \
            bookworm "$dir/kernel" "${VM_ARM64_MIRRORS[@]}" >&2
        local image
        image=$(ls "$dir"/kernel/boot/vmlinuz-* 2>/dev/null | head -n 1)
        [[ -n $image ]] || vm_die "linux-image-arm64 unpacked no boot/vmlinuz-*"
        local krel=${image##*/vmlinuz-}
        mkdir -p "$dir/root/boot" "$dir/root/usr/lib/modules"
        cp "$image" "$dir/kernel/boot/config-$krel" "$dir/root/boot/"
        cp -a "$dir/kernel/lib/modules/$krel" "$dir/root/usr/lib/modules/"
        rm -rf "$dir/kernel"
        depmod -b "$dir/root" "$krel"
        echo "$key" >"$dir/root.ok"
    fi
    # The repository's path, where the guest mounts it (tests/vm/init).
    mkdir -p "$dir/root$VM_REPO"
}

# Fetches and unpacks the kernel (once per release) and builds the initramfs
# (once per release and harness version). Sets VM_KREL, VM_KDIR, VM_KERNEL_IMG
# (the kernel QEMU boots), VM_INITRD.
vm_prepare() {
    local cache lock
    cache=$(vm_cache_dir)
    if [[ $VM_ARCH == arm64 ]]; then
        VM_KREL=arm64 # until its root is made: the kernel comes with it
    else
        VM_KREL=$(vm_kernel_release)
    fi
    VM_KDIR=$cache/$VM_KREL
    VM_KERNEL_IMG=$VM_KDIR/root/boot/vmlinuz-$VM_KREL
    VM_INITRD=$VM_KDIR/initramfs.cpio.gz
    case $VM_KDIR in
    /tmp/*) vm_die "the cache $VM_KDIR is under /tmp, which the guest hides" ;;
    *[[:space:]]*) vm_die "the cache path $VM_KDIR has spaces; the kernel \
command line cannot carry it (set VM_CACHE)" ;;
    esac
    # Parallel runs share the cache: one builds, the others wait for it.
    mkdir -p "$cache"
    exec {lock}>"$cache/.lock"
    flock "$lock"
    VM_BUSYBOX=/bin/busybox
    if [[ $VM_ARCH == arm64 ]]; then
        vm_prepare_arm64 "$VM_KDIR"
        VM_KREL=$(ls "$VM_KDIR/root/usr/lib/modules" | head -n 1)
        VM_KERNEL_IMG=$VM_KDIR/root/boot/vmlinuz-$VM_KREL
        VM_BUSYBOX=$VM_KDIR/root/usr/bin/busybox
    elif [[ ! -f $VM_KDIR/kernel.ok ]]; then
        vm_fetch_kernel
    fi
    if [[ -f $VM_KDIR/vmlinux ]]; then
        VM_KERNEL_IMG=$VM_KDIR/vmlinux
    fi
    local want
    want=$(vm_initramfs_inputs_hash)
    if [[ ! -f $VM_INITRD || $(cat "$VM_KDIR/initramfs.hash" 2>/dev/null) != "$want" ]]; then
        vm_build_initramfs
        echo "$want" >"$VM_KDIR/initramfs.hash"
    fi
    exec {lock}>&-
}

vm_fetch_kernel() {
    local pkg=linux-image-$VM_KREL
    vm_log "fetching $pkg"
    rm -rf "$VM_KDIR"
    mkdir -p "$VM_KDIR/deb"
    # apt's sandbox user cannot write to most build directories; as root
    # apt falls back to an unsandboxed download and says so on stderr.
    (cd "$VM_KDIR/deb" && apt-get download -q "$pkg" 2>&1 |
        grep -v 'Download is performed unsandboxed' >&2) || true
    local deb
    deb=$(ls "$VM_KDIR"/deb/"$pkg"_*.deb 2>/dev/null | head -n 1)
    [[ -n $deb ]] || vm_die "apt-get download $pkg produced no package"
    vm_log "unpacking $(basename "$deb")"
    dpkg-deb -x "$deb" "$VM_KDIR/root"
    [[ -f $VM_KERNEL_IMG ]] || vm_die "$deb has no $VM_KERNEL_IMG"
    [[ -d $VM_KDIR/root/lib/modules/$VM_KREL/kernel/fs/9p ]] ||
        vm_die "$pkg has no 9p file system (use the plain -amd64 flavour)"
    depmod -b "$VM_KDIR/root" "$VM_KREL"
    vm_extract_vmlinux
    rm -rf "$VM_KDIR/deb"
    touch "$VM_KDIR/kernel.ok"
}

# Under TCG, decompressing the xz bzImage costs ~4 s of every boot. With
# CONFIG_PVH, QEMU boots the uncompressed ELF kernel directly, so unpack it
# once here. Any surprise (other compression, no PVH) keeps the bzImage.
vm_extract_vmlinux() {
    local img=$VM_KDIR/root/boot/vmlinuz-$VM_KREL
    local config=$VM_KDIR/root/boot/config-$VM_KREL
    grep -q '^CONFIG_PVH=y' "$config" 2>/dev/null || return 0
    local offset
    offset=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$img" | head -n 1 |
        cut -d: -f1) || true
    [[ -n $offset ]] || return 0
    # Not a pipe: xz stops after its stream, and tail's SIGPIPE would fail
    # the pipeline under pipefail.
    if xz -dc --single-stream <(tail -c +"$((offset + 1))" "$img") \
        >"$VM_KDIR/vmlinux.new" 2>/dev/null &&
        [[ $(head -c 4 "$VM_KDIR/vmlinux.new") == $'\x7fELF' ]]; then
        mv "$VM_KDIR/vmlinux.new" "$VM_KDIR/vmlinux"
    else
        vm_log "cannot unpack $img; booting it compressed (slower)"
        rm -f "$VM_KDIR/vmlinux.new"
    fi
}

# The modules the initramfs needs to reach the host's root over 9p, with
# everything they depend on, as paths relative to lib/modules/RELEASE.
vm_boot_module_files() {
    local moddir=$1
    local -A seen=()
    local queue=(virtio_pci 9pnet_virtio 9p)
    while ((${#queue[@]})); do
        local name=${queue[0]}
        queue=("${queue[@]:1}")
        local line
        line=$(grep -E "(^|/)${name//_/[_-]}\.ko(\.[a-z]+)?:" \
            "$moddir/modules.dep" | head -n 1) || true
        if [[ -z $line ]]; then
            # Built into the kernel: nothing to ship.
            grep -qE "(^|/)${name//_/[_-]}\.ko" "$moddir/modules.builtin" ||
                vm_die "boot module $name is neither a module nor built in"
            continue
        fi
        local file=${line%%:*}
        [[ -n ${seen[$file]:-} ]] && continue
        seen[$file]=1
        echo "$file"
        local dep
        for dep in ${line#*:}; do
            dep=$(basename "$dep")
            queue+=("${dep%%.ko*}")
        done
    done
}

# tests/vm/modules without comments, its globs expanded against the kernel's
# module tree, its optional names (NAME?) kept where the tree has them. A
# glob that matches nothing is an error here, at build time.
vm_module_list() {
    local moddir=$1 line
    while read -r line; do
        line=${line%%#*}
        line=${line//[[:space:]]/}
        [[ -n $line ]] || continue
        if [[ $line == *'?' ]]; then
            line=${line%'?'}
            if [[ -n $(find "$moddir/kernel" -name "$line.ko*" | head -n 1) ]]; then
                echo "$line"
            fi
        elif [[ $line == *'*'* ]]; then
            local found
            found=$(find "$moddir/kernel" -name "$line.ko*" -printf '%f\n' |
                sed 's/\.ko.*//' | sort)
            [[ -n $found ]] || vm_die "no kernel module matches $line"
            echo "$found"
        else
            echo "$line"
        fi
    done <"$VM_SRC/modules"
}

vm_build_initramfs() {
    local moddir=$VM_KDIR/root/lib/modules/$VM_KREL
    local stage=$VM_KDIR/initramfs.d
    vm_log "building the initramfs for $VM_KREL"
    rm -rf "$stage"
    mkdir -p "$stage"/{bin,dev,proc,sys,host,etc,lib/modules/"$VM_KREL"}
    cp "$VM_BUSYBOX" "$stage/bin/busybox"
    file_is_static "$VM_BUSYBOX" ||
        vm_die "$VM_BUSYBOX is not static (install busybox-static)"
    cp "$VM_SRC/init" "$stage/init"
    chmod 755 "$stage/init"
    vm_module_list "$moddir" >"$stage/etc/modules"
    # Loading dummy must not create dummy0: tests expect only the
    # interfaces they make.
    mkdir -p "$stage/etc/modprobe.d"
    echo 'options dummy numdummies=0' >"$stage/etc/modprobe.d/dummy.conf"
    # Enough for modprobe by name; the full index comes with the host's
    # module tree, bind-mounted later.
    cp "$moddir"/modules.{dep,builtin,softdep} "$stage/lib/modules/$VM_KREL/"
    local f
    for f in $(vm_boot_module_files "$moddir"); do
        mkdir -p "$stage/lib/modules/$VM_KREL/$(dirname "$f")"
        cp "$moddir/$f" "$stage/lib/modules/$VM_KREL/$f"
    done
    (cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) \
        >"$VM_INITRD.new"
    mv "$VM_INITRD.new" "$VM_INITRD"
    rm -rf "$stage"
}

file_is_static() {
    # ldd refuses static binaries ("not a dynamic executable").
    [[ -x $1 ]] && ! ldd "$1" >/dev/null 2>&1
}
