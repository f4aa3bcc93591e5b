#!/usr/bin/env python3
"""Label the eval corpus by the written rule of LABELS.md (stdlib + orjson; independent of agent_breaker).

    python benchmarks/corpus/label.py [--explain SESSION]

Reads $AGENT_BREAKER_CORPUS/<source>.jsonl.gz and <source>.runs.jsonl (the recorded outcomes); writes
$AGENT_BREAKER_CORPUS/labels.jsonl (split dev / holdout by sha256 of the session id) and
$AGENT_BREAKER_CORPUS/labels-seen.jsonl (the older tests/traces/real-* traces, split "seen", outcome known only
from real-succeeded.txt). --explain prints the compared (action, result) keys of one session and its label.
"""

import argparse
import difflib
import glob
import gzip
import hashlib
import os
import re
import sys
from collections import defaultdict

import orjson
from _common import EVAL

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEEN = os.path.join(ROOT, "tests", "traces")

# Rule parameters (LABELS.md)
REPEAT_N = 3  # R: identical call + identical result, this many times in a row
CYCLE_PAIRS = 2  # C: a sequence of p = 2..4 calls, then the same p calls again and the first p-1 once more
#    (2p-1 calls in a row equal, with their results, to the call p positions earlier)
CYCLE_MAX_P = 4
STALL_N = 4  # S: this many calls at the end of an unsuccessful run, none with a new result
SAME_ERROR_N = 5  # F: this many calls in a row to one tool, near-identical arguments, identical error
SAME_ERROR_SIM = 0.8
TRANSIENT_N = 5  # R, when the repeated result is a transient failure (retrying those is expected)
TRANSIENT = re.compile(
    r"\b(502|503|504|429)\b|service unavailable|temporarily unavailable|timed out|timeout|"
    r"rate.?limit|too many requests|connection (reset|refused|aborted|error)",
    re.I,
)

# --- masking of volatile noise (applied to arguments and results before comparing) ---
MASKS = [
    (re.compile(r"\b(line|Line) \d+\b"), r"\1 N"),  # /bin/bash: line 13008:
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?"), "<ts>"),
    (re.compile(r"\b\d{1,2}:\d{2}:\d{2}(\.\d+)?\b"), "<time>"),
    (re.compile(r"\b1[5-9]\d{8}(\.\d+)?\b"), "<epoch>"),  # unix seconds
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<addr>"),  # memory addresses
    (re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,}\b"), "<hex>"),  # hashes, ids
    (re.compile(r"\b(pid|PID|pgid|process|Process|job)[ =:#]*\d+"), r"\1 <pid>"),
    (re.compile(r"^\[\d+\]( +\d+)?", re.M), "[<job>]"),  # [1] 12345
    (re.compile(r"(/tmp/|\btmp)[\w.-]+"), r"\1<tmp>"),
    (re.compile(r"\b\d+(\.\d+)?\s?(ms|µs|us|ns|s|sec|secs|seconds|m|min|minutes)\b"), "<dur>"),
    (re.compile(r"\s+"), " "),
]


def mask(s):
    if not isinstance(s, str):
        s = orjson.dumps(s, option=orjson.OPT_SORT_KEYS).decode()
    for rx, rep in MASKS:
        s = rx.sub(rep, s)
    return s.strip()


def canon_args(a):
    if isinstance(a, dict):
        return {k: canon_args(v) for k, v in sorted(a.items())}
    if isinstance(a, list):
        return [canon_args(v) for v in a]
    if isinstance(a, str):
        return mask(a)
    return a


#: done_claim's corpora: their last messages are judged by benchmarks/bench_done.py, not labelled
#: for loops here (and the held-out one stays unread)
DONE_CLAIM_ONLY = ("openhands", "claude-code-heldout")


def load(paths=None):
    """Sessions of the eval corpus (or of the given trace files) and the recorded outcomes."""
    sessions = {}
    order = []
    runs = {}
    if paths is None:
        paths = sorted(
            p
            for p in glob.glob(os.path.join(EVAL, "*.jsonl.gz"))
            if os.path.basename(p).split(".jsonl")[0] not in DONE_CLAIM_ONLY
        )
    for path in paths:
        source = os.path.basename(path).split(".jsonl")[0]
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as f:
            for line in f:
                ev = orjson.loads(line)
                sid = ev["session"]
                if sid not in sessions:
                    sessions[sid] = (source, [])
                    order.append(sid)
                sessions[sid][1].append(ev)
        rp = os.path.join(os.path.dirname(path), f"{source}.runs.jsonl")
        if os.path.exists(rp):
            with open(rp, "rb") as f:
                for line in f:
                    r = orjson.loads(line)
                    runs[r["session"]] = r
    return order, sessions, runs


def calls_of(events):
    """[(event_index_1based, action_key, result_key, segment)] for the session's tool calls."""
    results = {}
    for ev in events:
        if ev["type"] == "tool_result" and ev.get("call_id") is not None:
            results.setdefault(ev["call_id"], ev)
    out = []
    seen_user = set()
    segment = 0
    for i, ev in enumerate(events, 1):
        t = ev["type"]
        if t == "user":
            u = mask(ev.get("text") or "")
            if u not in seen_user:  # new information from outside starts a new segment
                seen_user.add(u)
                segment += 1
        elif t == "tool_call":
            r = results.get(ev.get("call_id"))
            if r is None:
                rk = "<no result>"
            else:
                body = r.get("result") if r.get("ok") else (r.get("error"), r.get("result"))
                rk = ("ok" if r.get("ok") else "err") + "|" + mask(body if body is not None else "")
            ak = ev["tool"] + "|" + orjson.dumps(canon_args(ev.get("args")), option=orjson.OPT_SORT_KEYS).decode()
            out.append((i, ak, rk, segment))
    return out


def find_repeat(calls):
    best = None
    run = 1
    for j in range(1, len(calls) + 1):
        same = j < len(calls) and calls[j][1:] == calls[j - 1][1:]
        if same:
            run += 1
            continue
        need = REPEAT_N
        rk = calls[j - 1][2]
        if rk.startswith("err|") and TRANSIENT.search(rk[:400]):
            need = TRANSIENT_N
        if run >= need:
            start = calls[j - run][0]
            if best is None:
                best = (start, run)
        run = 1
    return best


def find_same_error(calls):
    run = 1
    for j in range(1, len(calls)):
        a, b = calls[j - 1], calls[j]
        if (
            b[2].startswith("err|")
            and b[2] == a[2]
            and b[3] == a[3]
            and a[1].split("|", 1)[0] == b[1].split("|", 1)[0]
            and difflib.SequenceMatcher(None, a[1], b[1], autojunk=False).ratio() >= SAME_ERROR_SIM
        ):
            run += 1
            if run >= SAME_ERROR_N:
                return calls[j - run + 1][0], run
        else:
            run = 1
    return None


def find_cycle(calls):
    n = len(calls)
    for p in range(2, CYCLE_MAX_P + 1):
        need = CYCLE_PAIRS * p - 1  # matching pairs (j, j+p) in a row
        match = 0
        for j in range(n - p):
            if calls[j][1:] == calls[j + p][1:]:
                match += 1
                if match >= need:
                    s = j - need + 1
                    window = calls[s : s + p]
                    if len({c[1] for c in window}) > 1:  # not a plain repeat (that is clause R)
                        return calls[s][0], p
            else:
                match = 0
    return None


def find_stall(calls, success):
    if success or not calls:
        return None
    seen = set()
    novel = []
    for c in calls:
        key = (c[1], c[2])
        novel.append(key not in seen)
        seen.add(key)
    k = 0
    seg = calls[-1][3]
    for j in range(len(calls) - 1, -1, -1):
        if novel[j] or calls[j][3] != seg:
            break
        k += 1
    if k >= STALL_N:
        return calls[len(calls) - k][0], k
    return None


def label_session(events, success):
    calls = calls_of(events)
    hits = []
    r = find_repeat(calls)
    if r:
        hits.append((r[0], f"R: identical call with identical result {r[1]}x in a row"))
    f = find_same_error(calls)
    if f:
        hits.append((f[0], f"F: same tool failing with the same error {f[1]}x in a row, arguments only slightly changed"))
    c = find_cycle(calls)
    if c:
        hits.append((c[0], f"C: cycle of {c[1]} calls repeated with unchanged results"))
    s = find_stall(calls, success)
    if s:
        hits.append((s[0], f"S: last {s[1]} calls of an unsuccessful run brought no new result"))
    if hits:
        start, clause = min(hits)
        return "loop", start, clause, [h[1] for h in hits]
    if success is True:
        return "good", None, "G: succeeded by the benchmark's measure, no loop clause", []
    if success is None:
        return "other", None, "O: no recorded outcome, no loop clause", []
    return "other", None, "O: failed, no loop clause", []


def split_of(sid):
    return "holdout" if int(hashlib.sha256(sid.encode()).hexdigest(), 16) % 10 < 3 else "dev"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--explain", help="print the calls and clauses of one session")
    ap.add_argument("--out", default=os.path.join(EVAL, "labels.jsonl"))
    ap.add_argument("--out-seen", default=os.path.join(EVAL, "labels-seen.jsonl"))
    a = ap.parse_args()
    order, sessions, runs = load()
    seen_paths = sorted(glob.glob(os.path.join(SEEN, "real-*.jsonl")) + glob.glob(os.path.join(SEEN, "real-*.jsonl.gz")))
    s_order, s_sessions, _ = load(seen_paths)
    succeeded = set()
    if os.path.exists(os.path.join(SEEN, "real-succeeded.txt")):
        with open(os.path.join(SEEN, "real-succeeded.txt")) as f:
            succeeded = {line.strip() for line in f if line.strip() and not line.startswith("#")}
    if a.explain:
        if a.explain in s_sessions:
            sessions, runs = s_sessions, {a.explain: {"success": a.explain in succeeded or None}}
        src, evs = sessions[a.explain]
        for c in calls_of(evs):
            print(c[0], c[3], c[1][:150], "=>", c[2][:150])
        print(label_session(evs, (runs.get(a.explain) or {}).get("success")))
        return
    counts = defaultdict(lambda: defaultdict(int))
    with open(a.out, "wb") as f:
        for sid in order:
            src, evs = sessions[sid]
            success = (runs.get(sid) or {}).get("success")
            kind, start, clause, allc = label_session(evs, success)
            rec = {
                "session": sid,
                "source": src,
                "kind": kind,
                "loop_start": start,
                "split": split_of(sid),
                "clause": clause,
                "success": success,
            }
            if len(allc) > 1:
                rec["also"] = [h for h in allc if h != clause]
            f.write(orjson.dumps(rec) + b"\n")
            counts[src][kind] += 1
            counts[src][clause.split(":")[0]] += 1
    # The older real traces of tests/traces (already looked at, so not held out): labelled by the same rule,
    # split "seen". Their outcome is known only as "succeeded" (real-succeeded.txt); others count as unknown.
    with open(a.out_seen, "wb") as f:
        for sid in s_order:
            src, evs = s_sessions[sid]
            success = True if sid in succeeded else None
            kind, start, clause, allc = label_session(evs, success)
            rec = {
                "session": sid,
                "source": src,
                "kind": kind,
                "loop_start": start,
                "split": "seen",
                "clause": clause,
                "success": success,
            }
            if len(allc) > 1:
                rec["also"] = [h for h in allc if h != clause]
            f.write(orjson.dumps(rec) + b"\n")
            counts[src][kind] += 1
            counts[src][clause.split(":")[0]] += 1
    for src, c in sorted(counts.items()):
        print(src, dict(c), file=sys.stderr)


if __name__ == "__main__":
    main()
