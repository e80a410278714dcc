#!/usr/bin/env python3
"""Reads the e2e suite's reports.

  junit.py summarize OUT_DIR JUNIT...
      writes OUT_DIR/{passed,failed,skipped}.txt, a test name a line, sorted,
      from one run's report or from the reports of a run's shards
  junit.py compare OURS_DIR UPSTREAM_DIR
      the two runs side by side: passed by both, upstream only, ours only,
      failed by both, skipped by both, over the tests both ran; then those
      run by one side only (a shard the other has not run yet); the last
      lines are RESULT k8s-e2e-compare compared N / one_side_only N /
      upstream_only N / ours_only N
  junit.py shard DRY_RUN_JSON I N [PICK]
      from ginkgo's JSON report of a dry run (the specs the focus and skip
      select), the focus regex that selects shard I of N (1-based): every
      Nth spec in name order, so that a long run splits into runs that
      each fit a session; with PICK (a Python regex), only the specs whose
      full name it matches are counted and split (1 1 PICK: all of them)

Ginkgo reports its suite-level nodes ([SynchronizedBeforeSuite] and the
like) as test cases too: they are not tests, but one that failed fails
the run, so it is listed among the failures.
"""

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

KINDS = ("passed", "failed", "skipped")


def outcomes(junit):
    root = ET.parse(junit).getroot()
    found = {kind: set() for kind in KINDS}
    for case in root.iter("testcase"):
        name = case.get("name", "")
        status = case.get("status")
        if status is None:
            # Reporters that do not set it say so with child elements.
            if case.find("failure") is not None or case.find("error") is not None:
                status = "failed"
            elif case.find("skipped") is not None:
                status = "skipped"
            else:
                status = "passed"
        if name.startswith("[It] "):
            name = name[len("[It] "):]
        elif status != "failed":
            continue
        if status in ("pending", "skipped"):
            # Specs the focus and skip left out are reported as skipped
            # with this bare message; one that skipped itself (too few
            # nodes, a missing provider) says why.
            skipped = case.find("skipped")
            if skipped is not None and skipped.get("message") == "skipped":
                continue
            found["skipped"].add(name)
        elif status == "passed":
            found["passed"].add(name)
        else:
            # failed, panicked, interrupted, timedout
            found["failed"].add(name)
    return found


def summarize(out, junits):
    found = {kind: set() for kind in KINDS}
    for junit in junits:
        for kind, names in outcomes(junit).items():
            found[kind] |= names
    # Shards do not overlap, but reports of two different splits may: a
    # test that failed in any of them counts as failed.
    found["passed"] -= found["failed"]
    found["skipped"] -= found["passed"] | found["failed"]
    out = Path(out)
    for kind in KINDS:
        names = sorted(found[kind])
        (out / f"{kind}.txt").write_text("".join(n + "\n" for n in names))


def read(results):
    if not Path(results, "passed.txt").is_file():
        # What summarize writes over the default selection's runs (whole,
        # shards, picks); a FOCUS or SKIP run's `custom` folder is not one.
        sys.exit(
            f"k8s-e2e: nothing to compare in {results}: no run of the default"
            " selection (runs with FOCUS or SKIP are not compared)"
        )
    return {
        kind: set(Path(results, f"{kind}.txt").read_text().splitlines())
        for kind in KINDS
    }


def compare(ours_dir, upstream_dir):
    ours, upstream = read(ours_dir), read(upstream_dir)
    # Only a test both sides ran is compared: one run by one side only (its
    # shard not yet run by the other, a different selection, an aborted
    # run) is listed apart, not counted as a difference.
    ran_ours = ours["passed"] | ours["failed"]
    ran_upstream = upstream["passed"] | upstream["failed"]
    both = ran_ours & ran_upstream
    rows = [
        ("passed by both", ours["passed"] & upstream["passed"]),
        ("upstream only", (upstream["passed"] - ours["passed"]) & both),
        ("ours only", (ours["passed"] - upstream["passed"]) & both),
        ("failed by both", ours["failed"] & upstream["failed"]),
        ("skipped by both", ours["skipped"] & upstream["skipped"]),
    ]
    print(f"{'':20}{'tests':>6}")
    for title, names in rows:
        print(f"{title:20}{len(names):>6}")
    for title, names in rows[1:4]:
        if names:
            print(f"\n{title}:")
            for name in sorted(names):
                print(f"  {name}")
    one_side = (ran_ours ^ ran_upstream) | (ours["skipped"] ^ upstream["skipped"])
    if one_side:
        print("\nrun (or skipped) by one side only, not compared:")
        for name in sorted(one_side):
            side = "ours" if name in ran_ours | ours["skipped"] else "upstream"
            print(f"  {side}: {name}")
    print(f"RESULT k8s-e2e-compare compared {len(both)}")
    print(f"RESULT k8s-e2e-compare one_side_only {len(one_side)}")
    print(f"RESULT k8s-e2e-compare upstream_only {len(rows[1][1])}")
    print(f"RESULT k8s-e2e-compare ours_only {len(rows[2][1])}")


def go_regex_escape(text):
    # Go's RE2 refuses escapes of most non-punctuation characters (a space
    # among them), which Python's re.escape adds: escape only what is
    # special.
    return "".join("\\" + c if c in "\\.+*?()|[]{}^$" else c for c in text)


def shard(dry_run_json, index, count, pick=None):
    import json
    import re

    report = json.loads(Path(dry_run_json).read_text())
    names = sorted(
        " ".join(spec["ContainerHierarchyTexts"] + [spec["LeafNodeText"]])
        for suite in report
        for spec in suite.get("SpecReports") or []
        if spec.get("LeafNodeType") == "It" and spec.get("State") == "passed"
    )
    if pick is not None:
        picked = re.compile(pick)
        names = [n for n in names if picked.search(n)]
        if not names:
            sys.exit(f"no selected test matches {pick!r}")
    if not 1 <= index <= count:
        sys.exit(f"shard {index} of {count}?")
    mine = names[index - 1 :: count]
    if not mine:
        sys.exit(f"shard {index} of {count} has no test ({len(names)} selected)")
    # Anchored at the end only: ginkgo's text to match has more before
    # the outermost container's text.
    print("(" + "|".join(go_regex_escape(n) for n in mine) + ")$")


def main(argv):
    if len(argv) >= 4 and argv[1] == "summarize":
        summarize(argv[2], argv[3:])
    elif len(argv) == 4 and argv[1] == "compare":
        compare(argv[2], argv[3])
    elif len(argv) in (5, 6) and argv[1] == "shard":
        shard(argv[2], int(argv[3]), int(argv[4]), *argv[5:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
