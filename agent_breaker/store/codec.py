"""A compact, versioned JSON encoding of session state for shared stores (Redis).

Only plain numbers, hashes, names and ids go in (the engine keeps no payload text), but for
done_claim's quotes: the last command of each kind a coding agent ran (a test run, a build, a
commit...; up to 120 characters, environment assignments dropped), its output's summary line,
and the path of its last edited file. The value
is `[FORMAT, version, {slice: wire}]`: each slice of the state (spend, loops, turns, ledger,
breakers, tool views) writes and reads its own part (`to_wire` / `from_wire`); this module only
composes them. `FORMAT` changes whenever a layout does, and a stored session of another format
is treated as absent (session_cas.lua reads the first two numbers).
"""

from __future__ import annotations

import json
from typing import Any

from .._ledger import Ledger
from .._state import ChurnView, Effects, Failures, Loops, SessionState, Spend, turns_from_wire, turns_to_wire
from .._work import Work
from ..breaker import BreakerState

FORMAT = 3  # 3: named slices, each with its own wire form


def encode(s: SessionState) -> bytes:
    slices = {
        "meta": [s.key, s.tenant, s.feature, s.agent, s.created_s, None if s.halted is None else list(s.halted), s.escalation],
        "spend": s.spend.to_wire(),
        "loops": s.loops.to_wire(),
        "failures": s.failures.to_wire(),
        "turns": turns_to_wire(s.turns),
        "ledger": s.ledger.to_wire(),
        "breakers": {name: b.to_wire() for name, b in s.breakers.items()},
        "churn": None if s.churn is None else s.churn.to_wire(),
        "effects": None if s.effects is None else s.effects.to_wire(),
        "work": None if s.work is None else s.work.to_wire(),
    }
    # the standard library's JSON, not orjson: with orjson a Redis worker's memory per heavy
    # session was three times as large (RSS 56 -> 180 KiB, bench_attacks session_memory), past
    # sessions.max_bytes. The state holds finite numbers only (events refuse NaN and infinities)
    return json.dumps([FORMAT, s.version, slices], separators=(",", ":"), ensure_ascii=False).encode()


def decode(raw: bytes | str) -> SessionState | None:
    d = json.loads(raw)
    if not isinstance(d, list) or len(d) != 3 or d[0] != FORMAT:
        return None
    _, version, slices = d
    # a session stored before escalations has six meta fields
    key, tenant, feature, agent, created_s, halted, *escalation = slices["meta"]
    churn: Any = slices["churn"]
    return SessionState(
        key,
        tenant=tenant,
        feature=feature,
        agent=agent,
        created_s=created_s,
        spend=Spend.from_wire(slices["spend"]),
        halted=None if halted is None else (halted[0], halted[1]),
        escalation=escalation[0] if escalation else None,
        loops=Loops.from_wire(slices["loops"]),
        failures=Failures.from_wire(slices.get("failures")),
        turns=turns_from_wire(slices["turns"]),
        breakers={name: BreakerState.from_wire(name, b) for name, b in slices["breakers"].items()},
        ledger=Ledger.from_wire(slices["ledger"]),
        churn=None if churn is None else ChurnView.from_wire(churn),
        effects=None if slices.get("effects") is None else Effects.from_wire(slices["effects"]),
        work=None if slices.get("work") is None else Work.from_wire(slices["work"]),
        version=version,
    )
