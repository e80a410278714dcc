#!/usr/bin/env bash
# What the kernel's IPVS "trash" costs a sync under churn, in the guest.
#
#   tests/vm/ipvs-trash.sh [TRASHED]    (default 15000)
#
# A deleted real server is not freed: the kernel keeps it on a per-netns
# list (ip_vs_ctl.c, the dest trash) for 120 to 180 s in case it comes
# back, and every real server added walks that list first. Churn at 100
# endpoint changes a second keeps about 15,000 there once it has run for
# three minutes, so each add then costs more than in the churn's first
# minute. This times 1,000 adds with the trash empty and again with
# TRASHED real servers deleted just before, on one virtual server (the
# list is per network namespace, not per service), and prints the ratio.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ ${1:-} != --in-guest ]]; then
    exec "$VM_SRC/run" "$VM_SRC/ipvs-trash.sh" --in-guest "${1:-15000}"
fi
trashed=$2
vip=198.18.0.1:80
# Distinct addresses for every batch: a re-added real server would be
# found in the trash and reused, not walked past.
lines() { # OP FIRST COUNT
    local i
    for ((i = $2; i < $2 + $3; i++)); do
        if [[ $1 == -a ]]; then
            echo "-a -t $vip -r 198.19.$((i / 250)).$((i % 250 + 1)):80 -m -w 1"
        else
            echo "-d -t $vip -r 198.19.$((i / 250)).$((i % 250 + 1)):80"
        fi
    done
}
timed_ms() { # FILE: ipvsadm -R of it, in ms
    local start
    start=$(date +%s%N)
    ipvsadm -R <"$1"
    echo $((($(date +%s%N) - start) / 1000000))
}
work=$(mktemp -d)
ipvsadm -C
ipvsadm -A -t "$vip" -s rr
lines -a 0 1000 >"$work/empty"
empty=$(timed_ms "$work/empty")
lines -d 0 1000 | ipvsadm -R
for ((first = 1000; first < 1000 + trashed; first += 1000)); do
    lines -a "$first" 1000 | ipvsadm -R
    lines -d "$first" 1000 | ipvsadm -R
done
lines -a $((1000 + trashed)) 1000 >"$work/full"
full=$(timed_ms "$work/full")
ipvsadm -C
echo "1,000 real servers added: ${empty} ms with the trash empty," \
    "${full} ms with $((trashed + 1000)) deleted just before" \
    "($(awk -v a="$full" -v b="$empty" 'BEGIN { printf "%.1f", a / b }')x)"
