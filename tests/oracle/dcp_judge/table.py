#!/usr/bin/env python3
"""verdicts.tsv -> Markdown tables (fixture x candidate rows, world columns); last verdict per cell wins."""
import collections, os, sys
rows = collections.OrderedDict()
fails = []
for line in open(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", "/tmp/zm-dcp-oracle") + "/results/verdicts.tsv"):
    p = line.rstrip("\n").split("\t")
    if len(p) < 4:
        continue
    label, w, verdict, full = p[:4]
    fx, cand = label.split("|", 1)
    rows.setdefault((fx, cand), {})[int(w)] = verdict
    if verdict != "PASS":
        fails.append(full)
worlds = sorted({w for r in rows.values() for w in r})
print("| fixture | candidate | " + " | ".join(f"W={w}" for w in worlds) + " |")
print("|---|---|" + "---|" * len(worlds))
for (fx, cand), r in rows.items():
    c = "real checkpoint" if cand == "real" else f"`{cand}`"
    print(f"| {fx} | {c} | " + " | ".join(f"**{r[w]}**" if w in r and r[w] != "PASS" else r.get(w, "–") for w in worlds) + " |")
if fails:
    print("\nNot PASS:\n")
    for f in fails:
        print(f"- {f}")
