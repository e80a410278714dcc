#!/usr/bin/env bash
# What the kernel's IPVS rate estimators cost an idle guest, by table size.
#
#   tests/vm/ipvs-estimators.sh [SERVICES] [DESTS] [SECONDS]
#                                (default 10000 10 20)
#
# Every virtual and real server has a rate estimator (the `--rate`
# columns of ipvsadm) that the kernel updates every two seconds, whether
# or not traffic flows; kernel 6.1 walks them all from a timer. This
# loads SERVICES x DESTS rules (addresses from 198.18.0.0/15), then
# samples the guest's CPU time from /proc/stat for SECONDS with nothing
# else running, and again with the table flushed, and prints both in
# CPU seconds per minute: what every IPVS proxy's node pays at that size,
# beside the proxy's own CPU.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

if [[ ${1:-} != --in-guest ]]; then
    exec "$VM_SRC/run" "$VM_SRC/ipvs-estimators.sh" --in-guest \
        "${1:-10000}" "${2:-10}" "${3:-20}"
fi
services=$2 dests=$3 seconds=$4

busy_ticks() { # all CPUs' non-idle time, in USER_HZ ticks
    awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 }' /proc/stat
}
cpu_per_minute() { # the guest's CPU seconds per minute over $seconds
    local before after hz
    hz=$(getconf CLK_TCK)
    before=$(busy_ticks)
    sleep "$seconds"
    after=$(busy_ticks)
    awk -v d=$((after - before)) -v hz="$hz" -v s="$seconds" \
        'BEGIN { printf "%.2f", d / hz * 60 / s }'
}

rules=$(mktemp)
for ((s = 0; s < services; s++)); do
    vip="198.18.$((s / 250)).$((s % 250 + 1)):80"
    echo "-A -t $vip -s rr"
    for ((d = 0; d < dests; d++)); do
        n=$((s * dests + d))
        echo "-a -t $vip -r 198.19.$((n / 250 % 256)).$((n % 250 + 1)):$((8000 + n / 64000)) -m -w 1"
    done
done >"$rules"
ipvsadm -C
ipvsadm -R <"$rules"
loaded=$(ipvsadm -Ln | grep -c -- '-> [0-9]' || true)
# Let the load's own work settle before measuring.
sleep 5
full=$(cpu_per_minute)
ipvsadm -C
sleep 5
empty=$(cpu_per_minute)
echo "idle guest CPU with $services services x $dests real servers" \
    "($loaded real servers listed): $full s a minute; with the table empty: $empty s a minute"
