#!/usr/bin/env python3
"""Checks what the chart renders for each profile (tests/chart/test.sh).

    check.py REPO RENDERED_DIR PROFILE...

RENDERED_DIR holds PROFILE.yaml, `helm template`'s output for
tests/chart/profiles/PROFILE.yaml. Every profile's DaemonSet must carry
what makes it a node proxy in place of kube-proxy; then each profile's own
checks run. `create-config` is held to deploy/kube-ipvs-proxy.yaml,
`split-tokens` to deploy/split/split.yaml and `monitoring`'s PodMonitor to
deploy/monitoring/podmonitor.yaml: the same objects once the chart's own
labels are set aside, so the plain manifests and the chart cannot drift
apart unnoticed. A difference is printed as a diff.

Prints one line per profile and exits 1 if anything failed.
"""

import copy
import difflib
import re
import sys
from pathlib import Path

import yaml

# Labels and annotations the chart adds that the plain manifests do not
# have: Helm's bookkeeping, not what the objects do.
CHART_LABELS = {
    "helm.sh/chart",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by",
}
CHART_ANNOTATION_PREFIXES = ("checksum/",)


class Failed(Exception):
    pass


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def objects(docs, kind):
    return [d for d in docs if d.get("kind") == kind]


def one(docs, kind, name=None):
    found = [
        d
        for d in objects(docs, kind)
        if name is None or d["metadata"]["name"] == name
    ]
    if len(found) != 1:
        what = f"{kind} {name}" if name else kind
        raise Failed(f"expected exactly one {what}, found {len(found)}")
    return found[0]


def expect(condition, message):
    if not condition:
        raise Failed(message)


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def container(workload, name=None):
    containers = pod_spec(workload)["containers"]
    if name is None:
        return containers[0]
    return next(c for c in containers if c["name"] == name)


def volume(workload, name):
    for v in pod_spec(workload).get("volumes", []):
        if v["name"] == name:
            return v
    raise Failed(f"no volume {name} in {workload['metadata']['name']}")


def flag(command, name):
    prefix = f"--{name}="
    values = [a[len(prefix):] for a in command if a.startswith(prefix)]
    expect(len(values) == 1, f"--{name} once in {command}")
    return values[0]


def strip_chart_metadata(metadata):
    labels = {
        k: v
        for k, v in (metadata.get("labels") or {}).items()
        if k not in CHART_LABELS
    }
    if labels:
        metadata["labels"] = labels
    else:
        metadata.pop("labels", None)
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if not k.startswith(CHART_ANNOTATION_PREFIXES)
    }
    if annotations:
        metadata["annotations"] = annotations
    else:
        metadata.pop("annotations", None)


def normalise(obj):
    """The object as the API would take it, less the chart's labels: a
    ConfigMap's YAML files parsed, so that only content counts."""
    obj = copy.deepcopy(obj)
    strip_chart_metadata(obj["metadata"])
    template = obj.get("spec", {}).get("template")
    if isinstance(template, dict) and "metadata" in template:
        strip_chart_metadata(template["metadata"])
    if obj.get("kind") == "ConfigMap":
        obj["data"] = {
            k: yaml.safe_load(v) if k.endswith((".conf", ".yaml")) else v
            for k, v in obj.get("data", {}).items()
        }
    return obj


def same(chart_obj, plain_obj, what):
    """Fails with a diff unless the two objects are the same."""
    a = normalise(chart_obj)
    b = normalise(plain_obj)
    if a == b:
        return
    diff = difflib.unified_diff(
        yaml.safe_dump(b, sort_keys=True).splitlines(),
        yaml.safe_dump(a, sort_keys=True).splitlines(),
        fromfile=f"{what} (plain manifest)",
        tofile=f"{what} (chart)",
        lineterm="",
    )
    raise Failed(f"{what} differs from the plain manifest:\n" + "\n".join(diff))


# What every profile's DaemonSet must have.
def node_proxy(docs):
    ds = one(docs, "DaemonSet")
    labels = ds["spec"]["template"]["metadata"]["labels"]
    selector = ds["spec"]["selector"]["matchLabels"]
    expect(
        labels.get("k8s-app") == "kube-proxy",
        "the Pods lack k8s-app: kube-proxy (kube-prometheus' PodMonitor and the mixin select on it)",
    )
    expect(
        "app.kubernetes.io/name" in selector,
        f"app.kubernetes.io/name is not in the selector {selector}",
    )
    expect(
        "k8s-app" not in selector,
        "k8s-app is in the selector: kube-proxy's own DaemonSet selects on it",
    )
    for k, v in selector.items():
        expect(labels.get(k) == v, f"selector {k}={v} does not match the Pods")
    spec = pod_spec(ds)
    expect(
        spec.get("priorityClassName") == "system-node-critical",
        f"priorityClassName is {spec.get('priorityClassName')!r}",
    )
    expect(spec.get("hostNetwork") is True, "hostNetwork is not true")
    expect(
        {"operator": "Exists"} in (spec.get("tolerations") or []),
        "the DaemonSet does not tolerate every taint",
    )
    return ds


def check_default(repo, docs):
    ds = one(docs, "DaemonSet")
    expect(not objects(docs, "ConfigMap"), "a ConfigMap is rendered by default")
    expect(
        volume(ds, "config")["configMap"]["name"] == "kube-proxy",
        "the default configuration is not kubeadm's kube-proxy ConfigMap",
    )
    expect(
        container(ds)["image"] == "kube-ipvs-proxy:0.1.0",
        f"image {container(ds)['image']}: the tag should default to appVersion",
    )
    expect(
        pod_spec(ds)["nodeSelector"] == {"kubernetes.io/os": "linux"},
        "nodeSelector",
    )
    expect("affinity" not in pod_spec(ds), "an affinity without migration")
    check_init_container(repo, docs)
    kinds = sorted(d["kind"] for d in docs)
    expect(
        kinds == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"],
        f"rendered {kinds}",
    )


def check_create_config(repo, docs):
    plain = load(repo / "deploy/kube-ipvs-proxy.yaml")
    expect(
        sorted(d["kind"] for d in docs) == sorted(d["kind"] for d in plain),
        "not the plain manifest's kinds",
    )
    diffs = []
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"):
        try:
            same(one(docs, kind), one(plain, kind), kind)
        except Failed as e:
            diffs.append(str(e))
    expect(not diffs, "\n".join(diffs))


def check_split_tokens(repo, docs):
    plain_all = load(repo / "deploy/kube-ipvs-proxy.yaml")
    plain = load(repo / "deploy/split/split.yaml")
    node_sa = one(plain_all, "ServiceAccount")["metadata"]["name"]
    same(one(docs, "ServiceAccount", node_sa), one(plain_all, "ServiceAccount"), "ServiceAccount")
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding"):
        name = one(plain, kind)["metadata"]["name"]
        same(one(docs, kind, name), one(plain, kind), f"{kind} {name}")
    same(one(docs, "DaemonSet"), one(plain, "DaemonSet"), "DaemonSet")
    # The API side reads the nodes' kubeconfig.conf rather than a copy of
    # it in a ConfigMap of its own: the same file, so the same Deployment
    # once that volume is set aside.
    chart_dep = copy.deepcopy(one(docs, "Deployment"))
    plain_dep = copy.deepcopy(one(plain, "Deployment"))
    chart_kubeconfig = volume(chart_dep, "kubeconfig")["configMap"]
    plain_kubeconfig = volume(plain_dep, "kubeconfig")["configMap"]
    expect(
        chart_kubeconfig.get("items") == [{"key": "kubeconfig.conf", "path": "kubeconfig.conf"}],
        f"the API side's kubeconfig volume {chart_kubeconfig}",
    )
    chart_file = one(docs, "ConfigMap", chart_kubeconfig["name"])["data"]["kubeconfig.conf"]
    plain_file = one(plain, "ConfigMap", plain_kubeconfig["name"])["data"]["kubeconfig.conf"]
    expect(
        yaml.safe_load(chart_file) == yaml.safe_load(plain_file),
        "the API side's kubeconfig.conf is not split.yaml's",
    )
    for dep in (chart_dep, plain_dep):
        pod_spec(dep)["volumes"] = [
            v for v in pod_spec(dep)["volumes"] if v["name"] != "kubeconfig"
        ]
    same(chart_dep, plain_dep, "Deployment")


def check_split_certificates(repo, docs):
    ds = one(docs, "DaemonSet")
    dep = one(docs, "Deployment")
    node = container(ds)["command"]
    api = container(dep, "api-side")["command"]
    expect(not any(a.startswith("--api-token-file") for a in node), "a token flag with certificates")
    expect(not any(a.startswith("--token-") for a in api), "the API side reviews tokens with certificates")
    expect(flag(node, "api-endpoint") == "https://198.18.0.2:9443", "--api-endpoint")
    tls_dir = flag(node, "api-tls-dir")
    mount = next(m for m in container(ds)["volumeMounts"] if m["mountPath"] == tls_dir)
    host = volume(ds, mount["name"]).get("hostPath")
    expect(
        host == {"path": "/etc/kube-ipvs-proxy/node-tls", "type": "Directory"},
        f"the node's certificates are not its own folder: {host}",
    )
    expect(not any("projected" in v for v in pod_spec(ds)["volumes"]), "a projected token with certificates")
    tls = flag(api, "tls-dir")
    mount = next(m for m in container(dep, "api-side")["volumeMounts"] if m["mountPath"] == tls)
    expect(
        volume(dep, mount["name"])["secret"]["secretName"] == "api-side-tls",
        "the API side's Secret is not split.tls.existingSecret",
    )
    role = one(docs, "ClusterRole", "kube-ipvs-proxy-api-side")
    expect(
        all("tokenreviews" not in r["resources"] for r in role["rules"]),
        "the API side may create TokenReviews without tokens",
    )
    expect(not objects(docs, "Secret"), "the chart renders a Secret (certificates are never generated)")
    image = "registry.invalid/kube-ipvs-proxy@sha256:" + "0" * 64
    for w in (ds, dep):
        expect(container(w)["image"] == image, f"image {container(w)['image']}, not by digest")
    # The chart's ConfigMap feeds both.
    expect(volume(ds, "config")["configMap"]["name"] == "kube-ipvs-proxy", "node config")
    expect(volume(dep, "kubeconfig")["configMap"]["name"] == "kube-ipvs-proxy", "API side kubeconfig")


def exported_metrics(repo):
    """Every series name the proxy serves, from docs/metrics.md (generated
    from src/telemetry/catalogue.rs), histograms with their suffixes."""
    names = set()
    for line in (repo / "docs/metrics.md").read_text().splitlines():
        m = re.match(r"\| `([a-z_:]+)` \| (\w+) \|", line)
        if not m:
            continue
        name, kind = m.groups()
        names.add(name)
        if kind == "histogram":
            names.update(f"{name}_{s}" for s in ("bucket", "sum", "count"))
    expect(len(names) > 20, "docs/metrics.md lists too few metrics; has its format changed?")
    return names


PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "and", "or",
    "unless", "on", "ignoring", "rate", "increase", "time", "irate",
    "histogram_quantile", "absent", "offset", "bool",
}


def check_monitoring(repo, docs):
    plain = load(repo / "deploy/monitoring/podmonitor.yaml")[0]
    pm = one(docs, "PodMonitor", "kube-ipvs-proxy")
    expect(pm["metadata"]["namespace"] == "monitoring", "the PodMonitor's namespace")
    expect(pm["metadata"]["labels"].get("release") == "prometheus", "the PodMonitor's labels")
    chart_pm = copy.deepcopy(pm)
    del chart_pm["metadata"]["namespace"]
    del chart_pm["metadata"]["labels"]["release"]
    same(chart_pm, plain, "PodMonitor")
    side = one(docs, "PodMonitor", "kube-ipvs-proxy-api-side")
    dep = one(docs, "Deployment")
    expect(
        side["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"],
        "the API side's PodMonitor does not select the API side",
    )
    ports = [p["name"] for p in container(dep, "api-side")["ports"]]
    expect(side["spec"]["podMetricsEndpoints"][0]["port"] in ports, "the API side's metrics port")

    rule = one(docs, "PrometheusRule")
    known = exported_metrics(repo)
    alerts = []
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            alerts.append(r["alert"])
            expr = re.sub(r'"[^"]*"', '""', r["expr"])
            expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
            expr = re.sub(r"by \([^)]*\)", " ", expr)
            used = {
                w for w in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr)
                if w not in PROMQL_WORDS
            }
            expect(used, f"{r['alert']} uses no metric")
            unknown = sorted(used - known)
            expect(not unknown, f"{r['alert']} uses {unknown}, which the proxy does not export")
            expect(r["labels"].get("severity"), f"{r['alert']} has no severity")
    expect(len(alerts) == len(set(alerts)), f"alerts named twice: {alerts}")
    for needed in (
        "KubeIpvsProxySyncStalled",
        "KubeIpvsProxyKernelOperationErrors",
        "KubeIpvsProxyInvalidObjects",
        "KubeIpvsProxyApiSideRefusingNodes",
    ):
        expect(needed in alerts, f"no {needed} alert")


def check_migration(repo, docs):
    ds = one(docs, "DaemonSet")
    spec = pod_spec(ds)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expect(
        terms == [{"matchExpressions": [{"key": "kube-ipvs-proxy.io/enabled", "operator": "In", "values": ["true"]}]}],
        f"the migration's node affinity {terms}",
    )
    expect("podAffinity" in spec["affinity"], "affinity from values lost beside the migration's")
    expect(spec["nodeSelector"] == {"kubernetes.io/os": "linux"}, "nodeSelector lost")
    expect(spec["imagePullSecrets"] == [{"name": "registry"}], "imagePullSecrets")
    expect(
        ds["spec"]["template"]["metadata"]["annotations"] == {"example.invalid/owner": "network"},
        "podAnnotations",
    )


def check_init_container(repo, docs):
    """The default: the privileged steps in an init container, the proxy
    itself with three capabilities."""
    ds = one(docs, "DaemonSet")
    inits = pod_spec(ds)["initContainers"]
    expect(len(inits) == 1, "one init container")
    init = inits[0]
    expect("--init-only" in init["command"], f"the init container runs {init['command']}")
    expect(init["securityContext"] == {"privileged": True}, "the init container is not privileged")
    main = container(ds)
    expect(init["image"] == main["image"], "the init container's image is not the proxy's")
    expect(
        [m["mountPath"] for m in init["volumeMounts"]] == ["/var/lib/kube-proxy"],
        "the init container reads only the configuration",
    )
    sc = main["securityContext"]
    expect(sc.get("privileged") is False, "the proxy is still privileged")
    expect(
        sorted(sc["capabilities"]["add"]) == ["NET_ADMIN", "NET_RAW", "SYS_RESOURCE"],
        f"the proxy's capabilities {sc.get('capabilities')}",
    )
    flags = (Path(sys.argv[1]) / "src/config/flags.rs").read_text()
    expect("pub init_only:" in flags, "the proxy has no --init-only flag (src/config/flags.rs)")


def check_privileged(repo, docs):
    ds = one(docs, "DaemonSet")
    expect("initContainers" not in pod_spec(ds), "an init container with initContainer.enabled false")
    expect(
        container(ds)["securityContext"] == {"privileged": True},
        f"the proxy's securityContext {container(ds).get('securityContext')}",
    )


CHECKS = {
    "default": check_default,
    "create-config": check_create_config,
    "split-tokens": check_split_tokens,
    "split-certificates": check_split_certificates,
    "monitoring": check_monitoring,
    "migration": check_migration,
    "privileged": check_privileged,
}


def main():
    repo = Path(sys.argv[1])
    rendered = Path(sys.argv[2])
    failed = 0
    for profile in sys.argv[3:]:
        try:
            docs = load(rendered / f"{profile}.yaml")
            node_proxy(docs)
            check = CHECKS.get(profile)
            if check:
                check(repo, docs)
            what = "node proxy" + (", its own checks" if check else "")
            print(f"check: {profile}: ok ({len(docs)} objects; {what})")
        except (Failed, KeyError, StopIteration, TypeError) as e:
            failed += 1
            print(f"check: {profile}: FAILED: {type(e).__name__ + ': ' if not isinstance(e, Failed) else ''}{e}")
    missing = sorted(set(CHECKS) - set(sys.argv[3:]))
    if missing:
        failed += 1
        print(f"check: profiles without a rendering: {missing}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
