"""A compact, versioned JSON encoding of session state for shared stores (Redis).

Only plain numbers, hashes, names and ids go in (the engine keeps no payload text). Each
record is a list in field order, so the encoding stays small; `FORMAT` changes whenever the
layout does, and a stored session of another format is treated as absent.
"""

from __future__ import annotations

import base64
import json
import struct
from typing import Any, Iterable

from ..breaker import BreakerState, BreakerStateName
from ..receipts import Ledger
from ..session import CallFacts, Chain, ChurnView, KeyStat, Pending, SessionState
from ..windows import BucketWindow

FORMAT = 2  # 2: fingerprints and reference hashes packed (base64 of big-endian words)


def _fp(fp: tuple[int, ...] | None) -> str | None:
    """A 32-bit fingerprint as base64 (about half the size of its JSON numbers)."""
    return None if fp is None else base64.b64encode(struct.pack(f">{len(fp)}I", *fp)).decode("ascii")


def _unfp(d: str | None) -> tuple[int, ...] | None:
    if d is None:
        return None
    raw = base64.b64decode(d)
    return struct.unpack(f">{len(raw) // 4}I", raw)


def _hashes(values: Iterable[int]) -> str:
    values = sorted(values)
    return base64.b64encode(struct.pack(f">{len(values)}Q", *values)).decode("ascii")


def _unhashes(d: str) -> set[int]:
    raw = base64.b64decode(d)
    return set(struct.unpack(f">{len(raw) // 8}Q", raw))


def _window(w: BucketWindow | None) -> list[Any] | None:
    return None if w is None else [w.window_s, w.bucket_s, w.width, w.buckets, w.totals, w.evicted_at]


def _unwindow(d: list[Any] | None) -> BucketWindow | None:
    if d is None:
        return None
    return BucketWindow(d[0], d[1], d[2], d[3], d[4], d[5])


def _facts(f: CallFacts) -> list[Any]:
    return [f.tool, f.key, _fp(f.fp_text), _fp(f.fp_shape), _fp(f.fp_thought), f.tokens, f.cost_usd, f.depth, f.mutating]


def _unfacts(d: list[Any]) -> CallFacts:
    return CallFacts(d[0], d[1], _unfp(d[2]), _unfp(d[3]), _unfp(d[4]), d[5], d[6], d[7], d[8])  # type: ignore[arg-type]


def _breaker(b: BreakerState) -> list[Any]:
    return [b.name, b.state.value, _window(b.window), b.opened_at, b.open_interval_s, b.probes, b.next_probe,
            b.probe_successes, b.consecutive_failures, b.changed_at]


def _unbreaker(d: list[Any]) -> BreakerState:
    return BreakerState(d[0], BreakerStateName(d[1]), _unwindow(d[2]), d[3], d[4], d[5], d[6], d[7], d[8], d[9])


def encode(s: SessionState) -> bytes:
    data = [
        FORMAT, s.version, s.key, s.tenant, s.feature, s.agent, s.created_s,
        s.steps, s.tokens, s.cost_usd, s.tool_tokens, _window(s.velocity),
        None if s.halted is None else list(s.halted),
        {cid: [_facts(p.facts), p.call_id, p.breaker_key, p.probe, p.similar_text, p.similar_shape, p.history_index]
         for cid, p in s.pending.items()},
        s.auto_ids,
        [[k, st.runs, st.last_result, st.last_ts, st.polling, st.poll_ts, st.transient, st.epoch] for k, st in s.keys.items()],
        s.fail_key, s.fail_run, s.fail_transient, s.epoch,
        {tool: [_fp(c.fp_text), _fp(c.fp_shape), _fp(c.fp_thought), c.length, c.last_result, c.failed, c.transient, c.epoch,
                c.last_ts]
         for tool, c in s.chains.items()},
        s.history, s.history_base, list(s.seen),
        [[a, _fp(fp), own, rep] for a, fp, own, rep in s.turns],
        {k: _breaker(b) for k, b in s.breakers.items()},
        [s.ledger.receipts, _hashes(s.ledger.references), s.ledger.mutating],
        s.only_key,
        None if s.churn is None else [s.churn.key, s.churn.outcome, s.churn.calls, s.churn.sessions, s.churn.last_session,
                                      s.churn.last_ts],
    ]
    return json.dumps(data, separators=(",", ":")).encode()


def decode(raw: bytes | str) -> SessionState | None:
    d = json.loads(raw)
    if not isinstance(d, list) or not d or d[0] != FORMAT:
        return None
    (_, version, key, tenant, feature, agent, created_s, steps, tokens, cost, tool_tokens, velocity, halted,
     pending, auto_ids, keys, fail_key, fail_run, fail_transient, epoch, chains, history, history_base, seen,
     turns, breakers, ledger, only_key, churn) = d
    s = SessionState(key, tenant=tenant, feature=feature, agent=agent, created_s=created_s)
    s.version = version
    s.steps, s.tokens, s.cost_usd, s.tool_tokens = steps, tokens, cost, tool_tokens
    s.velocity = _unwindow(velocity)
    s.halted = None if halted is None else (halted[0], halted[1])
    s.pending = {cid: Pending(_unfacts(p[0]), p[1], p[2], p[3], p[4], p[5], p[6]) for cid, p in pending.items()}
    s.auto_ids = auto_ids
    s.keys = {k[0]: KeyStat(k[1], k[2], k[3], k[4], k[5], k[6], k[7]) for k in keys}
    s.fail_key, s.fail_run, s.fail_transient, s.epoch = fail_key, fail_run, fail_transient, epoch
    s.chains = {
        tool: Chain(_unfp(c[0]), _unfp(c[1]), _unfp(c[2]), c[3], c[4], c[5], c[6], c[7], c[8])  # type: ignore[arg-type]
        for tool, c in chains.items()
    }
    s.history, s.history_base = history, history_base
    s.seen = dict.fromkeys(seen)
    s.turns = [(a, _unfp(fp), own, rep) for a, fp, own, rep in turns]  # type: ignore[misc]
    s.breakers = {k: _unbreaker(b) for k, b in breakers.items()}
    s.ledger = Ledger(ledger[0], _unhashes(ledger[1]), ledger[2])
    s.only_key = only_key
    s.churn = None if churn is None else ChurnView(*churn)
    return s
