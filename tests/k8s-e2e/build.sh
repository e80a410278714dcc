#!/usr/bin/env bash
# Builds, on the host, everything Kubernetes' own [sig-network] e2e suite
# needs to run offline against a cluster of ours (no image registry and no
# GitHub downloads are reachable here, only the Go module proxy and Debian's
# mirror):
#
#   bin/e2e.test   upstream's specs and framework (k8s.io/kubernetes at
#                  K8S_VERSION, the control plane's) behind a test main of
#                  our own that links only the network tests
#                  (suite/e2e_test.go in the release's module,
#                  suite/K8S_VERSION): upstream's main does not build here
#   bin/ginkgo     the ginkgo CLI at the version the suite links, for
#                  parallel runs (e2e.test alone runs specs one at a time)
#   bin/agnhost, bin/regression-issue-74839
#                  the test images' programs, from the same module
#   bin/coredns    cluster DNS (coredns/main.go at the version kubeadm of
#                  the release deploys, coredns/VERSION), as kubeadm deploys
#                  it: many specs reach Services by name
#   bin/pause      the project's own pause (testkit), as node-e2e's
#   images/*.tar   the images the specs' Pods run, as Docker archives that
#                  `ctr images import` reads, named exactly as the suite
#                  asks for them: Pods pull IfNotPresent, so no registry is
#                  involved; each tag is the one `--list-images` gives.
#                  Built with buildah on a Debian base made from
#                  Debian's packages, as tests/node-e2e/images.sh does.
#   images.txt     NAME=ARCHIVE, one line per image, for the nodes to import
#   list-images.txt  `e2e.test --list-images`, the names the suite uses
#
#   tests/k8s-e2e/build.sh OUT_DIR [--go-only]
#
# --go-only stops after the Go programs (no cargo, no images), so that CI
# can build them beside other work.
#
# K8S_E2E_IMAGES_ONLY="agnhost pause ...": build only these images (by
# archive name) and list only them in images.txt, for a run whose tests
# need no others (CI's subset).
#
# Each part is skipped while the content it is made from (and how) is
# unchanged, so a second run costs seconds. Go's module and build caches are
# build-k8s.sh's for the release (tests/kubernetes/release.sh), which
# already hold most of Kubernetes compiled. OUT_DIR is the release's own.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
out=${1:?usage: $0 OUT_DIR [--go-only]}
go_only=${2:-}
mkdir -p "$out/bin" "$out/images"
out=$(cd "$out" && pwd)

# shellcheck source=../kubernetes/release.sh
source "$repo/tests/kubernetes/release.sh"
k8s_version=$K8S_VERSION
base=docker.io/library/debian:bookworm-slim

export GOMODCACHE="$k8s_root/gomod"
export GOCACHE="$k8s_dir/gocache"
# As build-k8s.sh: no toolchain fetched behind our back, and the committed
# go.sum is the only source of checksums.
export GOTOOLCHAIN=local
export GOFLAGS="-trimpath -mod=readonly"
export CGO_ENABLED=0

log() { printf '%s k8s-e2e: %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() {
    log "$*"
    exit 1
}

timings=()
# timed NAME COMMAND...: runs it and keeps how long it took for the summary.
timed() {
    local name=$1 start=$SECONDS
    shift
    "$@"
    timings+=("$name $((SECONDS - start))s")
}

# hash_of ITEM...: one digest over files (by content) and literal strings,
# so that a part is rebuilt when what it is made from, or how, changes.
hash_of() {
    local item
    for item in "$@"; do
        if [[ -f $item ]]; then
            printf 'file %s\n' "$(sha256sum <"$item")"
        else
            printf 'text %s\n' "$item"
        fi
    done | sha256sum | cut -d' ' -f1
}

# fresh FILE HASH: FILE was made from inputs with digest HASH.
fresh() { [[ -e $1 && "$(cat "$1.inputs" 2>/dev/null)" == "$2" ]]; }

command -v go >/dev/null || die "go is not installed"
go_version=$(go env GOVERSION)

# module DIR FILE...: DIR made a module of FILEs (shared sources and one
# release's go.mod/go.sum), rewritten only when a file differs, so Go's
# cache keeps seeing the same sources.
module() {
    local dir=$1 f
    shift
    mkdir -p "$dir"
    for f in "$@"; do
        [[ -f $f ]] || die "$f is missing: tests/kubernetes/new-release.sh $k8s_version writes it"
        cmp -s "$f" "$dir/${f##*/}" || cp "$f" "$dir/"
    done
}
suite_files=("$here/suite/e2e_test.go" "$here/suite/$k8s_version/go.mod"
    "$here/suite/$k8s_version/go.sum" "$here/suite/$k8s_version/format_test.go")
module "$out/src/suite" "${suite_files[@]}"
coredns_files=("$here/coredns/main.go" "$here/coredns/$coredns_version/go.mod"
    "$here/coredns/$coredns_version/go.sum")
module "$out/src/coredns" "${coredns_files[@]}"
suite=$out/src/suite
suite_inputs=("${suite_files[@]}" "$go_version" "$GOFLAGS")

# go_part NAME FILE HASH DIR COMMAND...: runs COMMAND in module DIR unless
# FILE is fresh.
go_part() {
    local name=$1 file=$2 hash=$3 dir=$4
    shift 4
    if fresh "$file" "$hash"; then
        log "$name: up to date"
        return
    fi
    log "$name: building"
    (cd "$dir" && "$@")
    echo "$hash" >"$file.inputs"
}

# Without these the suite reports v0.0.0 (in its log and --version).
version_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_ldflags+=" -X $pkg.gitVersion=$k8s_version"
    version_ldflags+=" -X $pkg.gitMajor=$(cut -d. -f1 <<<"${k8s_version#v}")"
    version_ldflags+=" -X $pkg.gitMinor=$(cut -d. -f2 <<<"${k8s_version#v}")"
    version_ldflags+=" -X $pkg.gitTreeState=clean"
done

[[ $(cd "$suite" && go list -m -f '{{.Version}}' k8s.io/kubernetes) == "$k8s_version" ]] ||
    die "suite/$k8s_version/go.mod does not pin k8s.io/kubernetes $k8s_version"

# One Go build at a time: the machine's cores are shared, and the builds
# share most packages through GOCACHE anyway.
timed e2e.test go_part e2e.test "$out/bin/e2e.test" \
    "$(hash_of "${suite_inputs[@]}" "$version_ldflags")" \
    "$suite" go test -c -ldflags="$version_ldflags" -o "$out/bin/e2e.test" .
timed ginkgo go_part ginkgo "$out/bin/ginkgo" \
    "$(hash_of "${suite_inputs[@]}" ginkgo)" \
    "$suite" go build -ldflags="-s -w" -o "$out/bin/ginkgo" github.com/onsi/ginkgo/v2/ginkgo
timed agnhost go_part agnhost "$out/bin/agnhost" \
    "$(hash_of "${suite_inputs[@]}" agnhost "$agnhost_version")" \
    "$suite" go build -ldflags="-s -w -X main.Version=$agnhost_version" \
    -o "$out/bin/agnhost" k8s.io/kubernetes/test/images/agnhost
wanted() { [[ -z ${K8S_E2E_IMAGES_ONLY:-} || " $K8S_E2E_IMAGES_ONLY " == *" $1 "* ]]; }

if wanted regression-issue-74839; then
    timed regression-issue-74839 go_part regression-issue-74839 "$out/bin/regression-issue-74839" \
        "$(hash_of "${suite_inputs[@]}" regression-issue-74839)" \
        "$suite" go build -ldflags="-s -w" \
        -o "$out/bin/regression-issue-74839" k8s.io/kubernetes/test/images/regression-issue-74839
fi
timed coredns go_part coredns "$out/bin/coredns" \
    "$(hash_of "${coredns_files[@]}" "$go_version" "$GOFLAGS")" \
    "$out/src/coredns" go build -ldflags="-s -w" -o "$out/bin/coredns" .

# The names come from the suite itself, so a version bump cannot leave an
# image under a tag nobody asks for unnoticed (checked below).
"$out/bin/e2e.test" --list-images | sort >"$out/list-images.txt"
if [[ $go_only == --go-only ]]; then
    log "times: ${timings[*]}"
    exit 0
fi

# The pause image's program is the project's own (testkit), as node-e2e's,
# built static so the image holds that one file. Checked by content before
# cargo runs: cargo waits for the shared target folder's lock even when it
# has nothing to do.
pause_part() {
    local host hash
    hash=$(hash_of "$repo/Cargo.toml" "$repo/Cargo.lock" "$repo/tests/testkit/Cargo.toml" \
        "$repo/tests/testkit/src/bin/pause.rs" "$(rustc -vV)")
    if fresh "$out/bin/pause" "$hash"; then
        log "pause: up to date"
        return
    fi
    log "pause: building"
    host=$(rustc -vV | sed -n 's/^host: //p')
    (cd "$repo" && RUSTFLAGS="-C target-feature=+crt-static" \
        cargo build --quiet --locked -p testkit --bin pause --target "$host")
    install -s -m 755 "$target/$host/debug/pause" "$out/bin/pause"
    echo "$hash" >"$out/bin/pause.inputs"
}
timed pause-binary pause_part

# ---- images ----------------------------------------------------------------

"$repo/tests/vm/deps.sh" buildah mmdebstrap runc

# As tests/node-e2e/images.sh makes it, under the same name, so whichever
# script runs first makes it for both.
# node-e2e's Debian base, made once and kept in buildah's storage.
timed base "$repo/tests/node-e2e/base-image.sh" "$out" >/dev/null
base_id=$(buildah images --no-trunc --format '{{.ID}}' "$base")

# listed REPOSITORY: the name, with its tag, under which the suite asks for
# an image of that repository (the last if it asks for several).
listed() {
    local name
    name=$(grep -E "^[^ ]*/$1:[^/]*\$" "$out/list-images.txt" | tail -1)
    [[ -n $name ]] || die "the suite asks for no $1 image; it lists: $(tr '\n' ' ' <"$out/list-images.txt")"
    printf '%s\n' "$name"
}

built=()
# image FILE NAME [CONTEXT_FILE...] < CONTAINERFILE: builds NAME from the
# Containerfile on stdin with the given files in its context, into
# images/FILE.tar, unless that archive is fresh.
image() {
    local file=$1 name=$2 ctx=$out/context/$1 containerfile hash
    shift 2
    containerfile=$(cat)
    if ! wanted "$file"; then
        log "$name: not wanted (K8S_E2E_IMAGES_ONLY)"
        return
    fi
    hash=$(hash_of "$base_id" "$name" "$containerfile" "$@")
    built+=("$name=$out/images/$file.tar")
    if fresh "$out/images/$file.tar" "$hash"; then
        log "$name: up to date"
        return
    fi
    log "$name: building"
    rm -rf "$ctx"
    mkdir -p "$ctx"
    local f
    for f in "$@"; do
        cp -a "$f" "$ctx/"
    done
    printf '%s\n' "$containerfile" >"$ctx/Containerfile"
    buildah build --quiet --pull=never --network host --layers \
        -f "$ctx/Containerfile" -t "$name" "$ctx" >/dev/null
    rm -f "$out/images/$file.tar"
    buildah push --quiet "$name" "docker-archive:$out/images/$file.tar:$name" >/dev/null
    echo "$hash" >"$out/images/$file.tar.inputs"
    rm -rf "$ctx"
}

# Upstream's is Alpine with bind-tools, curl, OpenBSD's nc, iproute2, iperf
# and bash; the specs run `nc -v`, `curl`, `wget -T`, `nslookup`, `dig` and
# `ip`/`ss` in it, and a DNS spec runs /coredns from it with a Corefile of
# its own. The two users and the group are what a SupplementalGroups spec
# expects to find in the image.
porter=$GOMODCACHE/k8s.io/kubernetes@$k8s_version/test/images/agnhost/porter
timed agnhost-image image agnhost "registry.k8s.io/e2e-test-images/agnhost:$agnhost_version" \
    "$out/bin/agnhost" "$out/bin/coredns" "$porter/localhost.crt" "$porter/localhost.key" <<EOF
FROM $base
RUN apt-get update \\
    && apt-get install -y --no-install-recommends curl wget netcat-openbsd \\
        iproute2 dnsutils iperf bash \\
    && rm -rf /var/lib/apt/lists/*
RUN mkdir /uploads \\
    && groupadd -g 50000 group-defined-in-image \\
    && useradd -m -u 1000 -G group-defined-in-image user-defined-in-image
COPY localhost.crt localhost.key coredns /
COPY agnhost /agnhost
RUN ln -s agnhost /agnhost-2
EXPOSE 80 8080 8081 9376 5000
ENTRYPOINT ["/agnhost"]
CMD ["pause"]
EOF

# Upstream's is Docker's busybox: the static binary with every applet
# linked in /bin, and `sh` as its command. Debian's build of it, alone.
timed busybox-image image busybox "$(listed e2e-test-images/busybox)" <<EOF
FROM $base AS debian
RUN apt-get update \\
    && apt-get install -y --no-install-recommends busybox-static
FROM scratch
COPY --from=debian /usr/bin/busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /tmp /root /etc && chmod 1777 /tmp \\
    && echo 'root:x:0:0:root:/root:/bin/sh' >/etc/passwd \\
    && echo 'nobody:x:65534:65534:nobody:/home:/bin/false' >>/etc/passwd \\
    && echo 'root:x:0:' >/etc/group && echo 'nobody:x:65534:' >>/etc/group
CMD ["sh"]
EOF

# Upstream's is Docker's nginx: the default page on port 80, nginx in the
# foreground, its logs on the container's output. Our own site file
# listens on IPv4 only, so a Pod without IPv6 starts too. One image under
# each tag the suite names (1.37 has a second, "new" one).
for nginx in $(grep -E '^[^ ]*/e2e-test-images/nginx:' "$out/list-images.txt"); do
timed "nginx-${nginx##*:}-image" image "nginx-${nginx##*:}" "$nginx" <<EOF
FROM $base
RUN apt-get update \\
    && apt-get install -y --no-install-recommends nginx-light \\
    && rm -rf /var/lib/apt/lists/* \\
    && printf 'server {\n  listen 80 default_server;\n  root /var/www/html;\n  index index.html index.nginx-debian.html;\n}\n' \\
        >/etc/nginx/sites-available/default \\
    && ln -sf /dev/stdout /var/log/nginx/access.log \\
    && ln -sf /dev/stderr /var/log/nginx/error.log
EXPOSE 80
STOPSIGNAL SIGQUIT
CMD ["nginx", "-g", "daemon off;"]
EOF
done

# The DNS specs' second prober (after agnhost): dig, in a Debian image;
# jessie-dnsutils until 1.36, glibc-dns-testing (the same content) since.
prober=$(grep -oE '/e2e-test-images/(jessie-dnsutils|glibc-dns-testing):' "$out/list-images.txt" |
    head -1 | cut -d/ -f3 | tr -d :)
[[ -n $prober ]] || die "the suite asks for no DNS prober image (jessie-dnsutils, glibc-dns-testing)"
timed dns-prober-image image "$prober" "$(listed "e2e-test-images/$prober")" \
    "$out/bin/coredns" <<EOF
FROM $base
RUN apt-get update \\
    && apt-get install -y --no-install-recommends dnsutils \\
    && rm -rf /var/lib/apt/lists/*
COPY coredns /coredns
EOF

timed regression-issue-74839-image image regression-issue-74839 \
    "$(listed e2e-test-images/regression-issue-74839)" \
    "$out/bin/regression-issue-74839" <<EOF
FROM $base
COPY regression-issue-74839 /regression-issue-74839
ENTRYPOINT ["/regression-issue-74839"]
EOF

# The CLOSE_WAIT spec runs `conntrack -L` (and sh, grep, sleep) in it on a
# node's network.
timed distroless-iptables-image image distroless-iptables \
    "$(listed build-image/distroless-iptables)" <<EOF
FROM $base
RUN apt-get update \\
    && apt-get install -y --no-install-recommends iptables conntrack ipset \\
    && rm -rf /var/lib/apt/lists/*
EOF

# Sandbox and a service-latency spec's Pods. Upstream's runs as 65535 too.
timed pause-image image pause "$(listed pause)" "$out/bin/pause" <<'EOF'
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
EOF

# As kubeadm's Deployment runs it (-conf /etc/coredns/Corefile), as root:
# the Deployment grants NET_BIND_SERVICE for port 53, which a non-root
# process would only get from a file capability.
timed coredns-image image coredns "registry.k8s.io/coredns/coredns:$coredns_version" "$out/bin/coredns" <<'EOF'
FROM scratch
COPY coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]
EOF

rm -rf "$out/context"
printf '%s\n' "${built[@]}" >"$out/images.txt"

# Every image we make for the specs must be one the suite asks for, under
# that exact name (CoreDNS is the cluster's, not the suite's). The network
# specs use no other image; the rest of the list belongs to specs of other
# SIGs that the network package happens to link.
for entry in "${built[@]}"; do
    name=${entry%%=*}
    [[ $name == */coredns:* ]] && continue
    grep -qxF "$name" "$out/list-images.txt" ||
        die "the suite does not ask for $name; it lists: $(tr '\n' ' ' <"$out/list-images.txt")"
done

for entry in "${built[@]}"; do
    log "${entry%%=*}: $(buildah images --format '{{.Size}}' "${entry%%=*}") (uncompressed)"
done
log "times: ${timings[*]}"
