#!/usr/bin/env bash
# The split's certificates (deploy/split/split.yaml): a CA, the API side's
# certificate for the names the nodes reach it by, the Secret the API side
# mounts (tls.crt, tls.key, ca.crt) and the ConfigMap the node proxies
# check it with (ca.crt). Nodes prove who they are with their
# ServiceAccount tokens, so they need no certificate of their own.
#
#   deploy/split/certificates.sh NAME...   e.g. api-side.example.net 198.18.0.2
#
# Needs openssl and kubectl (with rights in kube-system). The CA's key
# stays in the current folder (kube-ipvs-proxy-api-side-ca.key): keep it to
# renew the server certificate, or delete it.
set -euo pipefail

(($# > 0)) || { echo "usage: $0 NAME_OR_IP..." >&2; exit 64; }
names=()
for name in "$@"; do
    if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then
        names+=("IP:$name")
    else
        names+=("DNS:$name")
    fi
done
san=$(IFS=,; echo "${names[*]}")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ca_key=kube-ipvs-proxy-api-side-ca.key
[[ -f $ca_key ]] || openssl genrsa -out "$ca_key" 3072 2>/dev/null
openssl req -x509 -new -key "$ca_key" -days 3650 \
    -subj "/CN=kube-ipvs-proxy-api-side-ca" -out "$work/ca.crt"
openssl req -newkey rsa:3072 -nodes -keyout "$work/tls.key" \
    -subj "/CN=kube-ipvs-proxy-api-side" -out "$work/tls.csr" 2>/dev/null
printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\n' "$san" >"$work/ext"
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.crt" -CAkey "$ca_key" \
    -CAcreateserial -days 825 -extfile "$work/ext" -out "$work/tls.crt" 2>/dev/null

kubectl -n kube-system create secret generic kube-ipvs-proxy-api-side-tls \
    --from-file="$work/tls.crt" --from-file="$work/tls.key" \
    --from-file="$work/ca.crt" --dry-run=client -o yaml | kubectl apply -f -
kubectl -n kube-system create configmap kube-ipvs-proxy-api-side-ca \
    --from-file="$work/ca.crt" --dry-run=client -o yaml | kubectl apply -f -
echo "API side certificate for: $san"
