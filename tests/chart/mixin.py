#!/usr/bin/env python3
"""kubernetes-mixin's KubeVersionMismatch, as a promtool unit test over what
two real components served: the API server's kubernetes_build_info and
ours (tests/chart/test.sh scrapes both and runs promtool on the result).

    mixin.py APISERVER_METRICS OURS_METRICS OUT_DIR

Writes OUT_DIR/rules.yaml (the alert as kubernetes-mixin defines it in
alerts/system_alerts.libsonnet: the distinct vX.Y of git_version among
every job's kubernetes_build_info but DNS's, per cluster, above one for 15
minutes) and OUT_DIR/test.yaml with two cases: the series as scraped, the
alert quiet; ours as the proxy reported it before it said its Kubernetes
release (its own version, kube_ipvs_proxy_build_info's), the alert firing.
Both cases are built from the scrapes, so a build_info that drifts from
the API server's release fails the first.
"""

import json
import re
import sys

PAIR = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def series(path, name):
    """The label sets of NAME's samples in a text exposition."""
    found = []
    with open(path) as text:
        for line in text:
            if not line.startswith(name + "{"):
                continue
            body = line[len(name) + 1:line.rindex("}")]
            found.append({k: v.replace('\\"', '"').replace("\\\\", "\\")
                          for k, v in PAIR.findall(body)})
    if len(found) != 1:
        sys.exit(f"mixin: {path} has {len(found)} {name} series, not one")
    return found[0]


def selector(name, labels):
    inner = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def main():
    apiserver_path, ours_path, out = sys.argv[1:4]
    apiserver = series(apiserver_path, "kubernetes_build_info")
    ours = series(ours_path, "kubernetes_build_info")
    own = series(ours_path, "kube_ipvs_proxy_build_info")
    apiserver["job"] = "apiserver"
    ours["job"] = "kube-proxy"
    before = dict(ours, git_version=own["version"])

    rules = {
        "groups": [{
            "name": "kubernetes-system",
            "rules": [{
                "alert": "KubeVersionMismatch",
                "expr": 'count by (cluster) (count by (git_version, cluster) '
                        '(label_replace(kubernetes_build_info{job!~"kube-dns|coredns"},'
                        '"git_version","$1","git_version","(v[0-9]*.[0-9]*).*"))) > 1',
                "for": "15m",
                "labels": {"severity": "warning"},
            }],
        }],
    }

    def case(components, alerts):
        return {
            "interval": "1m",
            "input_series": [{"series": selector("kubernetes_build_info", c),
                              "values": "1x30"} for c in components],
            "alert_rule_test": [{"eval_time": "20m",
                                 "alertname": "KubeVersionMismatch",
                                 "exp_alerts": alerts}],
        }

    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            case([apiserver, ours], []),
            case([apiserver, before], [{"exp_labels": {"severity": "warning"}}]),
        ],
    }
    # JSON is YAML: no PyYAML needed.
    with open(f"{out}/rules.yaml", "w") as f:
        json.dump(rules, f, indent=1)
    with open(f"{out}/test.yaml", "w") as f:
        json.dump(test, f, indent=1)
    print(f"mixin: apiserver {apiserver['git_version']}, ours {ours['git_version']} "
          f"(kube-ipvs-proxy {own['version']})")


if __name__ == "__main__":
    main()
