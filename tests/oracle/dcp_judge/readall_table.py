#!/usr/bin/env python3
"""results/readall*.tsv + verify*.tsv -> one Markdown table."""
import os
import re
R = os.environ.get("RESULTS", os.environ.get("OUT", "/tmp/zm-dcp-oracle") + "/results") + "/"
ver = {}
for line in open(R + "verify.tsv"):
    p = line.rstrip("\n").split("\t")
    ver[p[0]] = (re.search(r"rc=(\d+)", p[1]).group(1), re.search(r"rc=(\d+)", p[2]).group(1))
for line in open(R + "verify_shared.tsv"):
    p = line.split()
    ver[p[0]] = (re.search(r"rc=(\d+)", line).group(1), None)
print("| source | read every file (`find ... -exec cat {} +`) | `zeromount verify MNT/<T>_dcp` | `zeromount verify` of the real tag |")
print("|---|---|---|---|")
for f in ("readall_shared.tsv", "readall.tsv"):
    for line in open(R + f):
        n, _, res, detail = line.rstrip("\n").split("\t")
        v = ver.get(n, ("?", None))
        vr = "–" if v[1] is None else f"exit {v[1]}" + (" (pass)" if v[1] == "0" else "")
        print(f"| {n} | {res}: {detail} | exit {v[0]}" + (" (pass)" if v[0] == "0" else "") + f" | {vr} |")
