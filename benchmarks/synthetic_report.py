"""Per-family (and per-shape) report of replay verdicts on a benchmarks.synthetic set.

    python -m benchmarks.synthetic_report TRACES LABELS VERDICTS [--sessions] [--markdown]

Counts, per family: runaway sessions caught (cut at or after loop_start), missed (never cut),
premature (cut before loop_start: counted as a miss, like tests/traces/score.py); legitimate
sessions left alone and falsely cut; the heuristics that cut; and the median of tool calls let
through between loop_start and the cut. For families whose pattern spans sessions (labels with a
"chain"), it also counts chains: a chain is caught when any of its runaway sessions is, and
`late` is how many runaway sessions of the chain ran before the first cut one. `--sessions` lists
every missed or falsely cut session with its shape. Reads the same inputs as score.py; imports
nothing of agent_breaker.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from typing import Any


def _load(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def analyse(traces: str, labels: str, verdicts: str) -> dict[str, Any]:
    calls: dict[str, list[int]] = defaultdict(list)  # session -> indexes of its tool calls
    counts: Counter[str] = Counter()
    for ev in _load(traces):
        sid = ev["session"]
        counts[sid] += 1
        if ev.get("type") == "tool_call":
            calls[sid].append(counts[sid])
    ver = {v["session"]: v for v in _load(verdicts) if isinstance(v, dict) and "session" in v}
    fams: dict[str, dict[str, Any]] = {}
    chains: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for lab in _load(labels):
        f = fams.setdefault(
            lab["family"],
            {
                "runaway": 0,
                "caught": 0,
                "missed": 0,
                "premature": 0,
                "legit": 0,
                "clean": 0,
                "false_cut": 0,
                "heur": Counter(),
                "wasted": [],
                "bad": [],
                "shapes_bad": Counter(),
                "shapes": Counter(),
            },
        )
        v = ver.get(lab["session"], {})
        te = v.get("trip_event") if v.get("tripped") else None
        shape = str(lab.get("shape", "")).split("/")[0]
        f["shapes"][shape] += 1
        row = {
            "session": lab["session"],
            "kind": lab["kind"],
            "shape": lab.get("shape"),
            "loop_start": lab["loop_start"],
            "trip_event": te,
            "heuristic": v.get("heuristic"),
            "missing": not v,
        }
        if "chain" in lab:
            chains[(lab["family"], lab["chain"])].append({**row, "attempt": lab.get("attempt", 0)})
        if te is not None:
            f["heur"][v.get("heuristic")] += 1
        if lab["kind"] == "runaway":
            f["runaway"] += 1
            if te is not None and te >= lab["loop_start"]:
                f["caught"] += 1
                f["wasted"].append(sum(1 for i in calls[lab["session"]] if lab["loop_start"] <= i < te))
            else:
                f["premature" if te is not None else "missed"] += 1
                f["bad"].append(row)
                f["shapes_bad"][shape] += 1
        else:
            f["legit"] += 1
            if te is None:
                f["clean"] += 1
            else:
                f["false_cut"] += 1
                f["bad"].append(row)
                f["shapes_bad"][shape] += 1
    chain_stats: dict[str, dict[str, Any]] = {}
    for (fam, _cid), rows in chains.items():
        c = chain_stats.setdefault(fam, {"chains": 0, "caught": 0, "late": []})
        rows.sort(key=lambda r: r["attempt"])
        run = [r for r in rows if r["kind"] == "runaway"]
        if not run:
            continue
        c["chains"] += 1
        hit = [k for k, r in enumerate(run) if r["trip_event"] is not None and r["trip_event"] >= r["loop_start"]]
        if hit:
            c["caught"] += 1
            c["late"].append(hit[0])
    return {"families": fams, "chains": chain_stats}


def render(rep: dict[str, Any], *, sessions: bool, markdown: bool) -> str:
    fams, chains = rep["families"], rep["chains"]
    out: list[str] = []
    head = [
        "family",
        "runaway",
        "caught",
        "missed",
        "premature",
        "legit",
        "false cut",
        "wasted(med)",
        "cut by",
        "misses/false cuts by shape",
    ]
    rows: list[list[str]] = []
    tot = Counter()
    for name in sorted(fams, key=lambda n: (not n.startswith("rw-"), n)):
        f = fams[name]
        for k in ("runaway", "caught", "missed", "premature", "legit", "false_cut"):
            tot[k] += f[k]
        med = statistics.median(f["wasted"]) if f["wasted"] else "-"
        rows.append(
            [
                name,
                str(f["runaway"] or "-"),
                str(f["caught"]) if f["runaway"] else "-",
                str(f["missed"]) if f["runaway"] else "-",
                str(f["premature"]) if f["runaway"] else "-",
                str(f["legit"] or "-"),
                str(f["false_cut"]) if f["legit"] else "-",
                str(med),
                ", ".join(f"{h} {n}" for h, n in f["heur"].most_common()) or "-",
                ", ".join(f"{s} {n}/{f['shapes'][s]}" for s, n in sorted(f["shapes_bad"].items())) or "-",
            ]
        )
    recall = tot["caught"] / max(1, tot["runaway"])
    fpr = tot["false_cut"] / max(1, tot["legit"])
    if markdown:
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        out += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
        out.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)))
        out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    out.append(
        f"\nrunaway sessions: {tot['caught']}/{tot['runaway']} caught (recall {recall:.3f}), "
        f"{tot['missed']} missed, {tot['premature']} premature; legitimate sessions: {tot['false_cut']}/{tot['legit']} "
        f"falsely cut (fpr {fpr:.3f})"
    )
    for fam, c in sorted(chains.items()):
        if c["chains"]:
            late = statistics.median(c["late"]) if c["late"] else "-"
            out.append(f"{fam}: chains caught {c['caught']}/{c['chains']}; runaway sessions before the first cut (median) {late}")
    if sessions:
        out.append("")
        for name in sorted(fams):
            for r in fams[name]["bad"]:
                what = "FALSE CUT" if r["kind"] == "legit" else ("PREMATURE" if r["trip_event"] is not None else "MISSED")
                out.append(
                    f"{name:22} {what:9} {r['session']:40} shape={r['shape']} loop_start={r['loop_start']} "
                    f"trip_event={r['trip_event']} by={r['heuristic']}"
                )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.synthetic_report", description=__doc__.split("\n\n")[0])
    ap.add_argument("traces")
    ap.add_argument("labels")
    ap.add_argument("verdicts")
    ap.add_argument("--sessions", action="store_true", help="list every missed or falsely cut session")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rep = analyse(a.traces, a.labels, a.verdicts)
    if a.json:
        for f in rep["families"].values():
            f["heur"] = dict(f["heur"])
            f["shapes_bad"] = dict(f["shapes_bad"])
            f["shapes"] = dict(f["shapes"])
        print(json.dumps(rep, indent=1))
    else:
        print(render(rep, sessions=a.sessions, markdown=a.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
