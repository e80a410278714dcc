#!/usr/bin/env bash
# One connection to a node's HTTP CONNECT agent (node.sh starts it under
# socat): the API server's way into the cluster network, as konnectivity's
# agent is in clusters whose control plane cannot route to nodes and Pods.
# The API server's egress (tests/e2e/control-plane.sh) hands each of its
# connections to a kubelet (logs, exec), a Pod or a Service (the proxy
# subresources) to this agent, which dials the target from inside the node:
# Pod addresses on other nodes are reached over the nodes' link.
set -uo pipefail

# Read a byte at a time (bash does so on a socket), so nothing after the
# request's head is taken from the stream that socat hands on.
IFS= read -r line || exit 0
read -r method target _ <<<"${line%$'\r'}"
if [[ $method != CONNECT || $target != *:* ]]; then
    printf 'HTTP/1.1 405 Method Not Allowed\r\n\r\n'
    exit 0
fi
while IFS= read -r line && [[ -n ${line%$'\r'} ]]; do :; done
# A target that cannot be reached is a refusal the API server reports as
# such, not a tunnel that closes at once.
{ exec 3<>"/dev/tcp/${target%:*}/${target##*:}"; } 2>/dev/null || {
    printf 'HTTP/1.1 502 Bad Gateway\r\n\r\n'
    exit 0
}
printf 'HTTP/1.1 200 Connection established\r\n\r\n'
exec socat - FD:3
