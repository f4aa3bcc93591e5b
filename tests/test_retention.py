"""Zero payload retention and bounded memory."""

from __future__ import annotations

import dataclasses
import math

import pytest
from conftest import call, examples, result, run, say, size_test, user
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_breaker import MemoryStore
from agent_breaker._ledger import HashPool
from agent_breaker._state import MAX_KEYS, MAX_SEEN

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
    names = {"s1", "run_sql", ":run_sql", "identical_failure", "closed", "open"}  # ":run_sql": its own breaker's key
    assert set(strings) <= names | {s for s in strings if s.startswith(("~", "run_sql failed"))}


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


@size_test
def test_a_long_session_stays_small(engine, clock):
    for i in range(3000):
        run(engine, clock, f"tool{i % 7}", {"i": i}, True, {"r": i}, step_s=0.01)
    state = engine.store.peek_session("s1")
    assert len(state.loops.keys) <= MAX_KEYS and len(state.loops.seen) <= MAX_SEEN and len(state.loops.history) <= 16
    assert len(state.loops.pending) == 0


# ----------------------------------------------------------------------------- the byte budget


def _measured_bytes(state) -> int:
    """What a copy of `state` takes in memory, as tracemalloc counts it."""
    import tracemalloc

    from agent_breaker.store import codec

    raw = codec.encode(state)
    codec.decode(raw)  # once first: a process-wide cache growing meanwhile is not the state
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        copy = codec.decode(raw)
        taken = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert copy is not None
    return taken


def _grow(engine, clock, shape: str, n: int, session: str = "s1") -> None:
    for i in range(n):
        if shape == "references":
            ids = [f"ORD-{i * 100 + j}" for j in range(50)]
            run(
                engine,
                clock,
                "fetch",
                {"page": i},
                True,
                {"ids": ids, "text": " ".join(str(10_000 + i * 50 + j) for j in range(50))},
                session=session,
            )
        elif shape == "distinct_calls":
            run(
                engine,
                clock,
                f"t{i % 40}",
                {"q": "long query text " * 20 + str(i)},
                True,
                {"r": "x" * 100 + str(i)},
                session=session,
            )
        elif shape == "coding":  # done_claim's record: commands, their outputs, files edited
            line = f"cd /repo && pytest tests/t{i}.py src/m{i}.py -q | tail -5 && git commit -am 'step {i}'"
            run(engine, clock, "Bash", {"command": line}, True, {"stdout": f"{i} passed in 0.1s"}, session=session)
            run(
                engine,
                clock,
                "Edit",
                {"file_path": f"src/m{i}.py", "old_string": "a", "new_string": "b"},
                True,
                "ok",
                session=session,
            )
        else:
            engine.record_assistant(say(f"step {i}: I will look at the {i}th file next", session=session))
            run(engine, clock, "read_file", {"path": f"src/m{i}.py"}, True, {"text": f"def f{i}(): pass"}, session=session)


@size_test
@pytest.mark.parametrize(
    ("shape", "n"), [("references", 400), ("distinct_calls", 300), ("conversation", 80), ("references", 1), ("coding", 300)]
)
def test_a_sessions_weight_is_close_to_what_it_takes_in_memory(engine, clock, shape, n):
    _grow(engine, clock, shape, n)
    state = engine.store.peek_session("s1")
    measured = _measured_bytes(state)
    assert 0.75 * measured <= state.weight() <= 1.5 * measured, (state.weight(), measured)


def test_a_flooding_tenant_evicts_its_own_sessions_not_anothers(make_engine, clock):
    store = MemoryStore(ttl_s=math.inf, max_bytes=2 << 20)
    engine = make_engine(store=store)
    for i in range(20):
        run(engine, clock, "search", {"q": i}, True, {"hits": [i]}, session=f"victim-{i}", tenant="acme")
    for i in range(3_000):
        run(engine, clock, "search", {"q": i, "pad": "x" * 200}, True, {"hits": [i]}, session=f"flood-{i}", tenant="mallory")
        assert store.bytes <= store.max_bytes
    assert all(store.peek_session(f"acme\x1fvictim-{i}") is not None for i in range(20))
    assert store.peek_session("mallory\x1fflood-0") is None and store.evicted > 0


def test_a_halted_session_is_compacted_not_dropped_to_make_room(make_engine, clock):
    store = MemoryStore(ttl_s=math.inf, max_bytes=1 << 20)
    engine = make_engine(store=store)
    for _ in range(5):
        run(engine, clock, "run_sql", {"q": 1}, False, None, session="halted", tenant="mallory")
    assert not engine.check_tool_call(call("run_sql", {"q": 1}, session="halted", tenant="mallory")).allowed
    for i in range(2_000):
        run(engine, clock, "search", {"q": i, "pad": "x" * 200}, True, {"hits": [i]}, session=f"flood-{i}", tenant="mallory")
    kept = store.peek_session("mallory\x1fhalted")
    assert kept is not None and kept.halted is not None and not kept.loops.keys  # compacted
    verdict = engine.check_tool_call(call("run_sql", {"q": 2}, session="halted", tenant="mallory"))
    assert not verdict.allowed and verdict.heuristic == "identical_failure"


def test_a_tenant_over_its_quota_loses_its_own_oldest_sessions(make_engine, clock):
    store = MemoryStore(ttl_s=math.inf, max_sessions_per_tenant=10)
    engine = make_engine(store=store)
    for i in range(25):
        run(engine, clock, "search", {"q": i}, True, {"hits": []}, session=f"m-{i}", tenant="mallory")
        run(engine, clock, "search", {"q": i}, True, {"hits": []}, session=f"a-{i % 5}", tenant="acme")
    kept = [i for i in range(25) if store.peek_session(f"mallory\x1fm-{i}") is not None]
    assert kept == list(range(15, 25))
    assert all(store.peek_session(f"acme\x1fa-{i}") is not None for i in range(5))


def test_the_sessions_byte_budget_is_config(make_engine):
    from agent_breaker.config import ConfigError, parse_config

    cfg = parse_config({"sessions": {"max_bytes": 64 << 20, "max_sessions_per_tenant": 500}})
    assert (cfg.sessions.max_bytes, cfg.sessions.max_sessions_per_tenant) == (64 << 20, 500)
    engine = make_engine({"sessions": {"max_bytes": 64 << 20, "max_sessions_per_tenant": 500}}, store=None)
    if isinstance(engine.store, MemoryStore):
        assert (engine.store.max_bytes, engine.store.max_sessions_per_tenant) == (64 << 20, 500)
    with pytest.raises(ConfigError, match="max_bytes"):
        parse_config({"sessions": {"max_bytes": 1000}})


@settings(max_examples=examples(300), deadline=None)
@given(
    cap=st.integers(1, 64),
    batches=st.lists(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 40), max_size=80), max_size=12),
)
def test_a_reference_pool_keeps_the_newest_hashes_as_an_ordered_set_would(cap, batches):
    """The compact pool (two arrays) against the plain model: an insertion-ordered dict where a
    hash seen again is new again and the oldest go past the cap; batches of one and of many
    (which take the pool's two paths)."""
    pool, model = HashPool(cap), {}
    for batch in batches:
        pool.remember(batch)
        for h in batch:
            model.pop(h, None)
            model[h] = None
        while len(model) > cap:
            del model[next(iter(model))]
        assert list(pool) == list(model)
        assert all(h in pool for h in model) and all(h not in pool for h in batch if h not in model)
    assert HashPool.unpacked(cap, pool.packed()) == pool
