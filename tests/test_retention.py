"""Zero payload retention and bounded memory."""

from __future__ import annotations

import dataclasses
import math

from conftest import call, not_on_cluster, result, run, say, user

from agent_breaker import MemoryStore
from agent_breaker.session import MAX_KEYS, MAX_SEEN

SECRETS = [
    "SELECT ssn FROM patients WHERE name = 'Alice Example'",
    "confidential diagnosis of Alice",
    "my password is hunter2",
    "Let me think about the secret merger with Initech",
    "the quarterly numbers are terrible",
]


def walk(value, out):
    """Every string inside a (dataclass) state."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            walk(getattr(value, f.name), out)
    elif isinstance(value, dict):
        for k, v in value.items():
            walk(k, out)
            walk(v, out)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for v in value:
            walk(v, out)
    elif isinstance(value, str):
        out.append(value)
    return out


def test_the_stored_session_holds_no_prompt_argument_or_result_text(engine, clock):
    clock.advance(1)
    v = engine.check_tool_call(call("run_sql", {"query": SECRETS[0]}, thought=SECRETS[3]))
    engine.record_tool_result(result("run_sql", True, {"rows": [SECRETS[1]]}, call_id=v.call_id))
    engine.record_assistant(say(SECRETS[4]))
    engine.record_user(user(SECRETS[2]))
    for _ in range(3):
        run(engine, clock, "run_sql", {"query": SECRETS[0]}, False, None, thought=SECRETS[3])
    state = engine.store.peek_session("s1")
    assert state is not None
    strings = walk(state, [])
    text = " ".join(strings) + repr(state)
    for word in ("Alice", "hunter2", "Initech", "quarterly", "ssn", "diagnosis"):
        assert word not in text, f"{word!r} from the payload is kept in the session state"
    # what strings remain are names and ids the engine needs
    assert set(strings) <= {"s1", "run_sql", "identical_failure"} | {s for s in strings if s.startswith(("~", "run_sql failed"))}


def test_idle_sessions_are_evicted_after_their_ttl(make_engine, clock):
    engine = make_engine(store=MemoryStore(ttl_s=60))
    engine.check_tool_call(call("a", {}, session="old"))
    clock.advance(120)
    engine.check_tool_call(call("a", {}, session="new"))
    assert engine.store.peek_session("old") is None
    assert engine.store.peek_session("new") is not None


def test_the_least_recently_used_session_goes_past_the_cap(make_engine, clock):
    store = MemoryStore(ttl_s=math.inf, max_sessions=100)
    engine = make_engine(store=store)
    for i in range(250):
        clock.advance(1)
        engine.check_tool_call(call("a", {"i": i}, session=f"s{i}"))
    assert store.session_count() == 100
    assert store.peek_session("s149") is None and store.peek_session("s249") is not None


@not_on_cluster
def test_a_long_session_stays_small(engine, clock):
    for i in range(3000):
        run(engine, clock, f"tool{i % 7}", {"i": i}, True, {"r": i}, step_s=0.01)
    state = engine.store.peek_session("s1")
    assert len(state.loops.keys) <= MAX_KEYS and len(state.loops.seen) <= MAX_SEEN and len(state.loops.history) <= 16
    assert len(state.loops.pending) == 0
