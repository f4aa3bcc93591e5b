"""Peers benchmark: agent-breaker's replay against the reference detectors, on the same traces, in one run.

    python -m benchmarks.bench_peers [--events 66000] [--seed 1] [--sessions 500] [--repeat 3]
                                     [--peers seed000,seed004,seed002,openhands] [--seed000-max-events 5000]
                                     [--seed000-budget-s 30] [--shared DIR] [--no-real] [--no-synthetic]
                                     [--breaker-calls 200000] [--profile [N]] [--out FILE]

Inputs: the benchmarks' payload-heavy synthetic trace (benchmarks/_trace.py, `generate_trace(..., payload="heavy")`:
tool results of 1-8 KB, thoughts of 200-2,000 characters), and every ../shared/traces/real-*.jsonl
plus synthetic-sample.jsonl (the shared folder beside the repository; skipped with a note when absent,
as on a CI clone). Each input is held in memory as its list of JSONL lines, and every engine replays
that list, JSON parsing included, and writes one verdict line per session (to an in-memory buffer):

  * agent-breaker: `replay_lines(lines, replay_engine(parse_config(None)))`, a fresh engine per run (its
    construction is not timed), then the verdicts as JSON lines - what `agent-breaker replay` does;
  * each peer of ../shared/tools/peers.py (seed000, seed004, seed002, openhands): its own `main()`, unmodified,
    with sys.argv patched and stdout / stderr captured; the module's `open` is shadowed so that its loop
    reads the same in-memory lines instead of a file (its per-line loop is otherwise exactly its own).

Wall time with time.perf_counter, best of --repeat runs per engine (runs of the engines interleaved), the
garbage collector on as normal (the inputs are frozen out of it once, gc.collect() before each run).
seed000 runs a pure-Python quadratic Levenshtein: it replays only the first whole sessions of an input
(one at a time, until the next would pass --seed000-max-events events or --seed000-budget-s seconds are
spent; then the subset again while the budget lasts), marked as such, and agent-breaker is timed again
on that same subset for its ratio. The CPU seconds of each run (time.process_time) are shown too: on a
busy machine they move less than the wall clock.

Also the bare breaker path: pybreaker's CircuitBreaker.call against agent-breaker's breaker core (the pure
acquire / record functions, and MemoryStore.breaker_acquire / breaker_record), configured alike (open after
5 failures in a row, one trial call after the open interval), on the same seeded sequences of successes and
failures (all successes; bursts of failures with an open interval of ~0, where both make the very same
moves; the same with 1 ms open), in ns per call. Figures only, nothing asserted; every figure goes to --out as
JSON (default benchmarks/results/peers.json), with the machine's facts and the load average at start and end.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import hashlib
import importlib.util
import io
import json
import os
import pstats
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from agent_breaker._replay import replay_engine, replay_lines
from agent_breaker.breaker import BreakerState, BreakerStateName, acquire, record
from agent_breaker.config import BreakerConfig, parse_config
from agent_breaker.store import MemoryStore
from benchmarks._harness import Run, describe_machine, out_argument, version
from benchmarks._trace import describe_payloads, generate_trace, payload_stats

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SHARED = REPO.parent / "shared"
PEERS = ("seed000", "seed004", "seed002", "openhands")
AB = "agent-breaker"
S_OPEN = BreakerStateName.OPEN
HEADLINE_PEER = "openhands"  # the done-when: at least as fast as the OpenHands stuck detector (payload-heavy input)


@dataclass
class Input:
    name: str
    lines: list[str]
    sessions: list[str]  # the session of each line
    nbytes: int
    note: str = ""

    @property
    def n_sessions(self) -> int:
        return len(set(self.sessions))

    def first_sessions(self, k: int) -> list[str]:
        """The lines of the first k sessions (in order of first appearance), in trace order."""
        keep: set[str] = set()
        for sid in self.sessions:
            if sid not in keep:
                if len(keep) == k:
                    continue
                keep.add(sid)
        return [line for line, sid in zip(self.lines, self.sessions, strict=True) if sid in keep]

    def session_groups(self) -> list[list[str]]:
        """The lines of each session, sessions in order of first appearance."""
        groups: dict[str, list[str]] = {}
        for line, sid in zip(self.lines, self.sessions, strict=True):
            groups.setdefault(sid, []).append(line)
        return list(groups.values())


@dataclass
class Timing:
    engine: str
    events: int
    runs: list[float] = field(default_factory=list)  # wall seconds
    cpu_runs: list[float] = field(default_factory=list)  # this process's CPU seconds (time.process_time) of each run
    sessions: int = 0
    tripped: int = 0
    blocked_calls: int = 0
    subset: str = ""  # non-empty: a subset of the input, described

    @property
    def best(self) -> float:
        return min(self.runs)

    @property
    def best_cpu(self) -> float:
        return min(self.cpu_runs)

    @property
    def us_per_event(self) -> float:
        return self.best / self.events * 1e6

    def as_dict(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "events": self.events,
            "best_s": self.best,
            "runs_s": self.runs,
            "cpu_runs_s": self.cpu_runs,
            "best_cpu_s": self.best_cpu,
            "us_per_event": self.us_per_event,
            "sessions": self.sessions,
            "tripped_sessions": self.tripped,
            "blocked_calls": self.blocked_calls,
            "subset": self.subset or None,
        }


# --------------------------------------------------------------------------- inputs
def _line_sessions(lines: list[str]) -> list[str]:
    return [str(json.loads(line).get("session")) for line in lines]


def synthetic_input(events: int, seed: int, sessions: int) -> Input:
    t0 = time.perf_counter()
    raw = generate_trace(events, seed, sessions, payload="heavy")
    stats = describe_payloads(payload_stats(raw))
    lines = [json.dumps(ev) for ev in raw]
    sids = [ev["session"] for ev in raw]
    del raw
    return Input(
        f"synthetic-heavy (seed {seed})",
        lines,
        sids,
        sum(len(x) + 1 for x in lines),
        f"generate_trace({events}, {seed}, {sessions}, payload='heavy') in {time.perf_counter() - t0:.1f} s; {stats}",
    )


def file_input(path: Path) -> Input:
    text = path.read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if line.strip()]
    return Input(path.name, lines, _line_sessions(lines), len(text.encode("utf-8")))


def shared_inputs(shared: Path) -> tuple[list[Input], str]:
    traces = shared / "traces"
    paths = sorted(traces.glob("real-*.jsonl"))
    sample = traces / "synthetic-sample.jsonl"
    if sample.is_file():
        paths.append(sample)
    if not paths:
        return [], f"no real-*.jsonl / synthetic-sample.jsonl under {traces}: skipped (a clone without ../shared)"
    return [file_input(p) for p in paths], ""


# --------------------------------------------------------------------------- engines
def load_peers(path: Path) -> ModuleType:
    """peers.py imported by path, as a module of its own name (never run as a script)."""
    spec = importlib.util.spec_from_file_location("shared_tools_peers", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _verdict_counts(out: str) -> tuple[int, int, int]:
    rows = [json.loads(x) for x in out.splitlines() if x.strip()]
    return len(rows), sum(bool(r["tripped"]) for r in rows), sum(int(r["blocked_calls"]) for r in rows)


def run_agent_breaker(lines: list[str]) -> tuple[float, float, str]:
    """One replay with a fresh engine (built before the clock starts): parse, decide, write the verdicts.
    Returns (wall seconds, CPU seconds, the verdict lines)."""
    engine = replay_engine(parse_config(None))
    errors = io.StringIO()
    out = io.StringIO()
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    results, _invalid = replay_lines(lines, engine, errors=errors)
    for r in results:
        out.write(json.dumps(r) + "\n")
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return elapsed, cpu, out.getvalue()


def run_peer(peers: ModuleType, name: str, lines: list[str]) -> tuple[float, float, str]:
    """One run of peers.py's main() on the in-memory lines: `open(path)` in its module returns them."""

    def _open(path: str, *args: Any, **kwargs: Any) -> contextlib.nullcontext[list[str]]:
        return contextlib.nullcontext(lines)

    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    vars(peers)["open"] = _open  # a module global shadows the builtin in its main()
    sys.argv = ["peers.py", name, "<in memory>"]
    try:
        gc.collect()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            c0, t0 = time.process_time(), time.perf_counter()
            peers.main()
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        sys.argv = argv
        vars(peers).pop("open", None)
    return elapsed, cpu, out.getvalue()


Runner = Callable[[list[str]], tuple[float, float, str]]


def record_run(t: Timing, runner: Runner, lines: list[str]) -> float:
    elapsed, cpu, out = runner(lines)
    t.runs.append(elapsed)
    t.cpu_runs.append(cpu)
    t.sessions, t.tripped, t.blocked_calls = _verdict_counts(out)
    return elapsed


def time_input(inp: Input, runners: dict[str, Runner], repeat: int) -> dict[str, Timing]:
    """Best of `repeat` runs per engine; each round runs every engine once, in turn."""
    timings = {name: Timing(name, len(inp.lines)) for name in runners}
    for _ in range(repeat):
        for name, runner in runners.items():
            record_run(timings[name], runner, inp.lines)
    return timings


def time_seed000(
    inp: Input, seed000: Runner, ab: Runner, repeat: int, max_events: int, budget_s: float
) -> tuple[Timing, Timing | None]:
    """seed000 on the first whole sessions of the input (in order of first appearance). Its detectors
    are per session, so a session costs it the same replayed alone: a first pass replays one session at
    a time until the next would pass max_events events, or budget_s seconds are spent (at least one
    session); that pass, summed, is its first run. Then the subset is replayed whole, up to `repeat` runs
    in all, while the budget lasts. Returns seed000's timing and agent-breaker's on the same lines (best
    of `repeat`), or None for the latter when the subset is the whole input."""
    groups = inp.session_groups()
    t = Timing("seed000", 0)
    wall = cpu = 0.0
    k = 0
    for group in groups:
        if k and (t.events + len(group) > max_events or wall >= budget_s):
            break
        w, c, out = seed000(group)
        sessions, tripped, blocked = _verdict_counts(out)
        wall, cpu, k = wall + w, cpu + c, k + 1
        t.events += len(group)
        t.sessions, t.tripped, t.blocked_calls = t.sessions + sessions, t.tripped + tripped, t.blocked_calls + blocked
    t.runs.append(wall)
    t.cpu_runs.append(cpu)
    whole = k == len(groups)
    lines = inp.lines if whole else inp.first_sessions(k)
    t.subset = "" if whole else f"first {k} of {len(groups)} sessions, {len(lines):,} of {len(inp.lines):,} events"
    spent = wall
    while len(t.runs) < repeat and spent + t.best <= budget_s:
        spent += record_run(t, seed000, lines)
    if whole:
        return t, None
    same = Timing(AB, len(lines), subset=t.subset)
    for _ in range(repeat):
        record_run(same, ab, lines)
    return t, same


# --------------------------------------------------------------------------- the bare breaker path
class ToolError(Exception):
    pass


def breaker_sequence(n: int, seed: int, *, failures: bool) -> list[bool]:
    """n call outcomes (True: success): 3% sporadic failures and, about every 100 calls, a burst of
    5-12 failures in a row that opens either breaker (5 in a row); or only successes."""
    if not failures:
        return [True] * n
    rng = random.Random(seed)
    out: list[bool] = []
    while len(out) < n:
        if rng.random() < 0.01:
            out.extend([False] * rng.randint(5, 12))
        else:
            out.append(rng.random() >= 0.03)
    return out[:n]


# (label, open interval in seconds of the real clock, failures in the sequence)
BREAKER_CASES: tuple[tuple[str, float, bool], ...] = (
    ("all successes (closed: the hot path)", 1e-3, False),
    ("mixed, open interval ~0: open -> one trial call -> closed or open again (same moves for both)", 1e-9, True),
    ("mixed, open interval 1 ms of the real clock (mostly refusals; how many depends on the speed)", 1e-3, True),
)


def _tool_raising(ok: bool) -> bool:
    if not ok:
        raise ToolError("failed")
    return ok


def _tool_returning(ok: bool) -> bool:
    return ok


def loop_baseline_raising(seq: list[bool], open_s: float) -> int:
    n = 0
    for ok in seq:
        try:
            _tool_raising(ok)
        except ToolError:
            n += 1
    return n


def loop_baseline_returning(seq: list[bool], open_s: float) -> int:
    n = 0
    for ok in seq:
        if not _tool_returning(ok):
            n += 1
    return n


def loop_pybreaker(seq: list[bool], open_s: float) -> int:
    """Returns how many times CircuitBreakerError was raised: on each opening, and on each refusal."""
    import pybreaker

    cb = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=open_s if open_s > 1e-6 else 0, success_threshold=1)
    call = cb.call
    raised = 0
    for ok in seq:
        try:
            call(_tool_raising, ok)
        except pybreaker.CircuitBreakerError:
            raised += 1
        except ToolError:
            pass
    return raised


def _ab_config(open_s: float) -> BreakerConfig:
    # pybreaker's semantics: open after 5 failures in a row, no rate or count threshold, a fixed open
    # interval, one trial call in half-open
    return BreakerConfig(
        consecutive_failures=5,
        failure_rate_pct=None,
        failure_threshold=None,
        open_s=open_s,
        max_open_s=open_s,
        backoff_multiplier=1.0,
        jitter_pct=0.0,
        half_open_probes=1,
    )


def loop_ab_core(seq: list[bool], open_s: float) -> int:
    """Returns openings + refusals (pybreaker's CircuitBreakerError count, on the same terms)."""
    cfg = _ab_config(open_s)
    st = BreakerState("tool")
    clock = time.monotonic
    n = 0
    for ok in seq:
        now = clock()
        p = acquire(st, cfg, now)
        if not p.allowed:
            n += 1
            continue
        if record(st, cfg, now, failed=not _tool_returning(ok), probe=p.probe) is not None and st.state is S_OPEN:
            n += 1
    return n


def loop_ab_store(seq: list[bool], open_s: float) -> int:
    """As loop_ab_core, through the in-memory store (its lock, its map of breakers)."""
    cfg = _ab_config(open_s)
    store = MemoryStore()
    breaker_acquire, breaker_record = store.breaker_acquire, store.breaker_record
    clock = time.monotonic
    n = 0
    for ok in seq:
        now = clock()
        p = breaker_acquire("tool", cfg, now)
        if not p.allowed:
            n += 1
            continue
        rec = breaker_record("tool", cfg, now, failed=not _tool_returning(ok), slow=False, probe=p.probe)
        if rec.transition is not None and rec.state is S_OPEN:
            n += 1
    return n


BREAKER_LOOPS: tuple[tuple[str, str, Callable[[list[bool], float], int]], ...] = (
    ("baseline: tool raises on failure, no breaker", "failures", loop_baseline_raising),
    ("baseline: tool returns ok, no breaker", "failures", loop_baseline_returning),
    ("pybreaker CircuitBreaker.call", "CircuitBreakerError raised", loop_pybreaker),
    ("agent-breaker core acquire + record", "openings + refusals", loop_ab_core),
    ("agent-breaker MemoryStore.breaker_acquire + _record", "openings + refusals", loop_ab_store),
)


def bench_breakers(n: int, seed: int, repeat: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, open_s, failures in BREAKER_CASES:
        seq = breaker_sequence(n, seed, failures=failures)
        rows: dict[str, Any] = {}
        for name, counted, loop in BREAKER_LOOPS:
            runs = []
            count = 0
            for _ in range(repeat):
                gc.collect()
                t0 = time.perf_counter()
                count = loop(seq, open_s)
                runs.append(time.perf_counter() - t0)
            rows[name] = {"ns_per_call": min(runs) / n * 1e9, "runs_s": runs, "count": count, "counted": counted}
        out[label] = {"calls": n, "failures": seq.count(False), "open_s": open_s, "loops": rows}
    return out


# --------------------------------------------------------------------------- report
def _ratio_text(ab_s: float, peer_s: float) -> str:
    x = peer_s / ab_s
    return f"{x:.2f}x faster" if x >= 1 else f"{1 / x:.2f}x slower"


def print_input(inp: Input, rows: list[Timing], ab_full: Timing, ab_subsets: dict[str, Timing]) -> None:
    mb = inp.nbytes / 1e6
    print(f"\n{inp.name}: {len(inp.lines):,} events, {inp.n_sessions:,} sessions, {mb:.1f} MB")
    if inp.note:
        print(f"  {inp.note}")
    print(
        f"  {'engine':<24}{'events':>8}{'best s':>9}{'cpu s':>9}{'us/event':>10}{'tripped':>10}{'blocked':>8}"
        f"{'ab/peer':>9}{'peer/ab':>9}  agent-breaker is"
    )

    def row(name: str, t: Timing, ratio: str = "") -> None:
        tripped = f"{t.tripped}/{t.sessions}"
        print(
            f"  {name:<24}{t.events:>8,}{t.best:>9.3f}{t.best_cpu:>9.3f}{t.us_per_event:>10.1f}{tripped:>10}"
            f"{t.blocked_calls:>8,}{ratio}"
        )

    for t in rows:
        if t.engine == AB:
            row(AB, t)
            continue
        ref = ab_subsets.get(t.engine, ab_full)
        row(
            t.engine + (" *" if t.subset else ""),
            t,
            f"{ref.best / t.best:>9.3f}{t.best / ref.best:>9.3f}  {_ratio_text(ref.best, t.best)}",
        )
        if t.subset:
            row(f"  {AB}, same lines", ref)
            print(f"  * {t.engine} on a subset: {t.subset}; its ratios are against agent-breaker on the same subset")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--events", type=int, default=66_000, help="events of the payload-heavy synthetic trace (default 66000)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the synthetic trace (default 1)")
    ap.add_argument("--sessions", type=int, default=500, help="sessions of the synthetic trace (default 500)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per engine and input; the best counts (default 3)")
    ap.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated peers of peers.py (default {','.join(PEERS)})")
    ap.add_argument(
        "--seed000-max-events", type=int, default=5000, help="seed000 replays at most this many events (default 5000)"
    )
    ap.add_argument(
        "--seed000-budget-s", type=float, default=30.0, help="seed000's time budget per input, estimated (default 30)"
    )
    ap.add_argument("--shared", type=Path, default=DEFAULT_SHARED, help=f"the shared folder (default {DEFAULT_SHARED})")
    ap.add_argument("--no-real", action="store_true", help="only the synthetic trace, not ../shared/traces")
    ap.add_argument("--no-synthetic", action="store_true", help="only ../shared/traces, not the synthetic trace")
    ap.add_argument("--breaker-calls", type=int, default=200_000, help="calls of the bare breaker sequence (0: skip)")
    ap.add_argument(
        "--profile",
        type=int,
        nargs="?",
        const=15,
        default=0,
        metavar="N",
        help="also cProfile one agent-breaker replay of the synthetic trace and print the top N functions (default 15)",
    )
    out_argument(ap, "peers")
    args = ap.parse_args(argv)
    run = Run("bench_peers", args, argv)
    t0 = time.perf_counter()
    peers_wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = sorted(set(peers_wanted) - set(PEERS))
    if unknown:
        ap.error(f"unknown peers {unknown}: choose from {', '.join(PEERS)}")

    peers_path = args.shared / "tools" / "peers.py"
    peers: ModuleType | None = load_peers(peers_path) if peers_path.is_file() else None
    peers_note = (
        f"{peers_path} (sha256 {hashlib.sha256(peers_path.read_bytes()).hexdigest()[:12]})"
        if peers is not None
        else f"{peers_path} absent: peers skipped, agent-breaker alone"
    )
    if peers is None:
        peers_wanted = []

    inputs: list[Input] = []
    if not args.no_synthetic:
        inputs.append(synthetic_input(args.events, args.seed, args.sessions))
    shared_note = "not read (--no-real)"
    if not args.no_real:
        real, shared_note = shared_inputs(args.shared)
        inputs += real
        shared_note = shared_note or f"{len(real)} files from {args.shared / 'traces'}"
    # the inputs are the harness's data: keep them out of the collector's way
    gc.collect()
    gc.freeze()

    load0 = run.machine["load_average_at_start"]
    print("agent-breaker vs reference detectors (python -m benchmarks.bench_peers)")
    print(describe_machine(run.machine))
    if load0[0] > (run.machine["cpu_count"] or 1):
        print("     (the machine is busy: wall times are inflated and noisy; compare the cpu s column too)")
    print(f"pydantic {version('pydantic')} | rapidfuzz {version('rapidfuzz')} | pybreaker {version('pybreaker')}")
    print(f"peers: {peers_note}")
    print(f"shared traces: {shared_note}")
    print(
        f"method: every engine replays the input's lines from memory (JSON parsing included) and writes its verdict lines; "
        f"best of {args.repeat} runs,\n"
        "        wall clock (time.perf_counter), GC on (inputs frozen), one process, one thread; agent-breaker = "
        "replay_lines + replay_engine(parse_config(None))"
    )

    engine_build_s = min(_timed_build() for _ in range(3))
    print(f"        agent-breaker engine construction (not in the timings): {engine_build_s * 1e3:.1f} ms")

    assert peers is not None or not peers_wanted
    runners: dict[str, Runner] = {AB: run_agent_breaker}
    for name in peers_wanted:
        if name != "seed000":
            runners[name] = _peer_runner(peers, name)

    results: list[dict[str, Any]] = []
    summary: list[tuple[str, str, float, float, str]] = []  # input, peer, ab s, peer s, subset
    for inp in inputs:
        timings = time_input(inp, runners, args.repeat)
        ab_full = timings[AB]
        rows = list(timings.values())
        ab_subsets: dict[str, Timing] = {}
        if "seed000" in peers_wanted:
            t000, ab_same = time_seed000(
                inp,
                _peer_runner(peers, "seed000"),
                run_agent_breaker,
                args.repeat,
                args.seed000_max_events,
                args.seed000_budget_s,
            )
            rows.append(t000)
            if ab_same is not None:
                ab_subsets["seed000"] = ab_same
        print_input(inp, rows, ab_full, ab_subsets)
        for t in rows:
            if t.engine != AB:
                ref = ab_subsets.get(t.engine, ab_full)
                summary.append((inp.name, t.engine, ref.best, t.best, t.subset))
        results.append(
            {
                "input": inp.name,
                "events": len(inp.lines),
                "sessions": inp.n_sessions,
                "bytes": inp.nbytes,
                "note": inp.note or None,
                "timings": [t.as_dict() for t in rows],
                "agent_breaker_on_subsets": {k: v.as_dict() for k, v in ab_subsets.items()},
                "ratios": {
                    t.engine: {
                        "ab_over_peer": ab_subsets.get(t.engine, ab_full).best / t.best,
                        "peer_over_ab": t.best / ab_subsets.get(t.engine, ab_full).best,
                        "subset": t.subset or None,
                    }
                    for t in rows
                    if t.engine != AB
                },
            }
        )

    if summary:
        print("\nratios, peer time / agent-breaker time (> 1: agent-breaker faster; seed000 * on a subset, same lines for both)")
        names = list(peers_wanted)
        print(f"  {'input':<34}" + "".join(f"{n:>14}" for n in names))
        for inp in inputs:
            cells = []
            for n in names:
                hit = next((s for s in summary if s[0] == inp.name and s[1] == n), None)
                cells.append("" if hit is None else f"{hit[3] / hit[2]:.2f}{'*' if hit[4] else ''}")
            print(f"  {inp.name:<34}" + "".join(f"{c:>14}" for c in cells))
        if not args.no_synthetic:
            heavy = inputs[0].name
            head = next((s for s in summary if s[0] == heavy and s[1] == HEADLINE_PEER), None)
            if head is not None:
                ok = head[2] <= head[3]
                print(
                    f"  payload issue, done-when: agent-breaker at least as fast as {HEADLINE_PEER} on {heavy}: "
                    f"{'yes' if ok else 'NO'} ({_ratio_text(head[2], head[3])})"
                )
            rest = [s for s in summary if s[0] == heavy]
            if rest:
                beaten = [s[1] for s in rest if s[2] < s[3]]
                print(
                    f"  target: faster than every peer on {heavy}: {'yes' if len(beaten) == len(rest) else 'no'} "
                    f"(faster than {', '.join(beaten) or 'none'})"
                )

    breakers: dict[str, Any] | None = None
    if args.breaker_calls > 0:
        breakers = bench_breakers(args.breaker_calls, args.seed, args.repeat)
        print(
            f"\nbare breaker path: ns per call, best of {args.repeat}, {args.breaker_calls:,} calls of a no-op tool; "
            "both breakers open after 5 failures in a row\n  and let one trial call through after the open interval "
            "(real clock; agent-breaker reads time.monotonic() per call)"
        )
        for label, b in breakers.items():
            print(f"  {label}: {b['failures']:,} failures in the sequence")
            for name, row in b["loops"].items():
                print(f"    {name:<52}{row['ns_per_call']:>8.0f} ns   ({row['counted']}: {row['count']:,})")

    if args.profile and not args.no_synthetic:
        prof = cProfile.Profile()
        engine = replay_engine(parse_config(None))
        prof.enable()
        replay_lines(inputs[0].lines, engine, errors=io.StringIO())
        prof.disable()
        print(f"\ncProfile of one agent-breaker replay of {inputs[0].name} (profiler overhead inflates small calls)")
        stats = pstats.Stats(prof, stream=sys.stdout)
        stats.sort_stats("tottime").print_stats(args.profile)
        stats.sort_stats("cumulative").print_stats("agent_breaker", args.profile)

    wall = time.perf_counter() - t0
    load1 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nwall time of this benchmark {wall:.0f} s; load average at the end {load1}")
    figures = {
        "versions": {d: version(d) for d in ("pydantic", "rapidfuzz", "pybreaker")},
        "peers": peers_note,
        "shared_traces": shared_note,
        "repeat": args.repeat,
        "engine_build_s": engine_build_s,
        "inputs": results,
        "breakers": breakers,
    }
    run.write(figures, args.out)
    return 0


def _timed_build() -> float:
    t0 = time.perf_counter()
    replay_engine(parse_config(None))
    return time.perf_counter() - t0


def _peer_runner(peers: ModuleType | None, name: str) -> Runner:
    assert peers is not None

    def run(lines: list[str]) -> tuple[float, float, str]:
        return run_peer(peers, name, lines)

    return run


if __name__ == "__main__":
    sys.exit(main())
