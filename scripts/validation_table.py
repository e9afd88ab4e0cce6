#!/usr/bin/env python3
"""The ns-3 air's validation table (issue 10 point 6) from the committed runs.

Reads every docs/results/ns3-validation-*.json (the output of `airpack lab
validate`), keeps for each (preset, codec, topology) the newest measured
emulated row on the ns-3 air (its simulated capacity and the agreement
`lab validate` computed against it), the newest tc-air capacity and the newest
pure simulation, and prints one markdown table. A row the ns-3 air could not
measure (its lag exceeded the rule on every try) says so. Usage:

    python3 scripts/validation_table.py [docs/results]
"""
import glob
import json
import os
import sys

TOPOS = ["string:1", "string:2", "string:3", "string:4", "string:5", "seed001"]
PRESETS = ["b1", "b2", "b5.5", "b11", "b11s", "a6", "a12", "a24", "a54"] + [f"ht{k}" for k in range(8)]


def measured(r):
    return r is not None and not r.get("error") and r.get("capacity") is not None


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "docs/results"
    runs = []
    for f in glob.glob(os.path.join(d, "ns3-validation-*.json")):
        j = json.load(open(f))
        runs.append((j.get("started_unix_s", 0), os.path.basename(f), j))
    runs.sort(key=lambda t: t[0])
    sim, ns3, ns3_tried, tc = {}, {}, {}, {}
    for _, name, j in runs:  # oldest first: newer rows overwrite older ones
        for r in j.get("rows", []):
            k = (r["preset"], r["codec"], r["topology"])
            if measured(r.get("sim")):
                sim[k] = r["sim"]["capacity"]
            if r.get("ns3") is not None:
                if measured(r["ns3"]):
                    ns3[k] = (r["ns3"]["capacity"], r["sim"]["capacity"] if measured(r.get("sim")) else None, r.get("agree"), name)
                else:
                    ns3_tried[k] = name
            if measured(r.get("tc")):
                tc[k] = r["tc"]["capacity"]
    print("| preset | codec | " + " | ".join(TOPOS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in TOPOS) + " |")
    total = agree = disagree = unmeasurable = untried = 0
    for p in PRESETS:
        for c in ("g729", "g711"):
            cells = []
            for t in TOPOS:
                k = (p, c, t)
                if k not in sim and k not in ns3:
                    cells.append("")
                    continue
                total += 1
                tcs = f" / tc {tc[k]}" if k in tc else ""
                if k in ns3:
                    cap, s, a, _ = ns3[k]
                    mark = "" if a else (" **DISAGREE**" if a is False else " ?")
                    agree += bool(a)
                    disagree += a is False
                    cells.append(f"{s} / {cap}{tcs}{mark}")
                elif k in ns3_tried:
                    unmeasurable += 1
                    cells.append(f"{sim[k]} / lag{tcs}")
                else:
                    untried += 1
                    cells.append(f"{sim[k]} / -{tcs}")
            if any(cells):
                print(f"| {p} | {c} | " + " | ".join(cells) + " |")
    print()
    print(f"Cells: pure simulation / ns-3 air [/ tc air]. {total} rows: {agree} agree, {disagree} disagree, "
          f"{unmeasurable} not measurable (the air lagged on every try: `lag`), {untried} not tried (`-`).")


if __name__ == "__main__":
    main()
