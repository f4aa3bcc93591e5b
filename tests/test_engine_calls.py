"""How much a tool call costs the engine's front and its store (issue 36): a call re-enters the
`Engine`'s own methods at most 3 times (the rest is in `_reads`, the deciders and `_apply`), and
makes at most 4 store calls on the memory store with every feature on: the global budget's tenant and
feature windows, session_churn's tool views, duplicate_mutation's tenant effects, a dependency's
breaker, a sub-agent's family."""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections import Counter
from typing import Any

import pytest

from agent_breaker import Engine, FakeClock, ReceiptKeys
from agent_breaker._state import SessionState
from agent_breaker.breaker import BreakerConfig, BreakerStateName
from agent_breaker.engine import _engine
from agent_breaker.store import MemoryStore
from agent_breaker.store.base import SpendAdd

#: every method of the Store interface
STORE_METHODS = (
    "update_session",
    "update_sessions",
    "peek_session",
    "read_many",
    "add_spend",
    "breaker_acquire",
    "breaker_record",
    "breaker_release",
    "breaker_force",
    "breaker_state",
    "breaker_list",
)
EVERYTHING_ON = {
    "global_budget": {"max_tokens": 10_000_000, "tenant_max_tokens": 20_000_000},
    "tools": {"http_get": {"dependency_arg": "url"}, "issue_refund": {"mutating": True}},
}
#: a sub-agent's session of a tenant: its calls share its parent's failing streaks
SUB_AGENT = {"session": "child", "parent_session": "parent", "tenant": "acme", "feature": "f1", "input_tokens": 10}


def engine_methods_reached(method: str) -> list[str]:
    """The `self._x(...)`-style calls of Engine's own methods reached from `method`, followed
    through each callee (lambdas and nested functions included), in the order met."""
    source = textwrap.dedent(inspect.getsource(_engine.Engine))
    cls = ast.parse(source).body[0]
    assert isinstance(cls, ast.ClassDef)
    methods = {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}
    reached: list[str] = []

    def walk(name: str, path: tuple[str, ...]) -> None:
        for node in ast.walk(methods[name]):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "self"
                and node.func.attr in methods
                and node.func.attr not in path
            ):
                reached.append(node.func.attr)
                walk(node.func.attr, (*path, node.func.attr))

    walk(method, (method,))
    return reached


def test_a_tool_call_re_enters_the_engine_front_at_most_3_times():
    assert engine_methods_reached("check_tool_call") == ["_begin", "_commit"]


class CountingStore(MemoryStore):
    """A MemoryStore that counts the calls made on its Store interface (not its own inner ones)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: Counter[str] = Counter()
        self._depth = 0


def _counted(name: str) -> Any:
    inner = getattr(MemoryStore, name)

    def counted(self: CountingStore, *args: Any, **kwargs: Any) -> Any:
        if self._depth == 0:
            self.calls[name] += 1
        self._depth += 1
        try:
            return inner(self, *args, **kwargs)
        finally:
            self._depth -= 1

    return counted


for _name in STORE_METHODS:
    setattr(CountingStore, _name, _counted(_name))


@pytest.fixture
def counted() -> tuple[Engine, CountingStore]:
    store = CountingStore()
    engine = Engine(
        EVERYTHING_ON, store=store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral(), escalations=False
    )
    return engine, store


#: (tool, args) in order: the session's opening (3 calls), the call that leaves it, steady state
CALLS = [
    ("http_get", {"url": "https://api.example.com/a"}),
    ("issue_refund", {"order": "o1", "amount": 5}),
    ("http_get", {"url": "https://api.example.com/b"}),
    ("search", {"q": "x"}),
    ("issue_refund", {"order": "o2", "amount": 7}),
    ("search", {"q": "y"}),
]


def store_calls(engine: Engine, store: CountingStore) -> list[tuple[int, int]]:
    """(store calls of the check, of the result) for each of CALLS."""
    counts = []
    for i, (tool, args) in enumerate(CALLS):
        store.calls.clear()
        assert engine.check_tool_call({**SUB_AGENT, "tool": tool, "args": args, "call_id": f"c{i}"}).allowed
        check = sum(store.calls.values())
        store.calls.clear()
        engine.record_tool_result({**SUB_AGENT, "tool": tool, "call_id": f"c{i}", "ok": True, "result": {"n": i}})
        counts.append((check, sum(store.calls.values())))
    return counts


def test_a_tool_call_makes_at_most_4_store_calls(counted):
    engine, store = counted
    # check: one read (2 spend windows, the tool view, the tenant's effects, the family's
    # streaks, the dependency's held state), the breaker, the session; then the views it changed,
    # in one call (its effect in flight; the opening's tools, once, as the session leaves its
    # opening). result: the session, the breaker's outcome, the tenant's effects (done)
    assert store_calls(engine, store) == [(3, 3), (4, 4), (3, 3), (4, 3), (4, 4), (3, 3)]
    assert store.calls == {"update_session": 2, "breaker_record": 1}


def test_the_reads_of_a_call_are_one_round_trip_on_redis(redis_store, monkeypatch):
    import redis.client

    trips: Counter[str] = Counter()
    command = redis_store.redis.execute_command
    execute = redis.client.Pipeline.execute

    def one_command(*args: Any, **kwargs: Any) -> Any:
        trips[str(args[0])] += 1
        return command(*args, **kwargs)

    def one_pipeline(self: Any, *args: Any, **kwargs: Any) -> Any:
        trips["pipeline"] += 1
        return execute(self, *args, **kwargs)

    monkeypatch.setattr(redis_store.redis, "execute_command", one_command)
    monkeypatch.setattr(redis.client.Pipeline, "execute", one_pipeline)
    engine = Engine(
        EVERYTHING_ON, store=redis_store, clock=FakeClock(), listeners=[], receipt_keys=ReceiptKeys.ephemeral(), escalations=False
    )
    per_call = []
    for i, (tool, args) in enumerate(CALLS):
        trips.clear()
        assert engine.check_tool_call({**SUB_AGENT, "tool": tool, "args": args, "call_id": f"c{i}"}).allowed
        # every read in one pipeline; as the session leaves its opening (the 4th call), the views
        # it changed are read in one more
        assert trips["pipeline"] == (2 if i == 3 else 1)  # every read: the windows, the views, the family, the held breaker
        per_call.append(sum(trips.values()))
        engine.record_tool_result({**SUB_AGENT, "tool": tool, "call_id": f"c{i}", "ok": True, "result": {"n": i}})
    # + the breaker, the session's compare-and-set (a first read of a session it did not write:
    # a GET first), each view it changed (GET and compare-and-set)
    assert per_call == [4, 5, 3, 4, 4, 3]


def test_read_many_adds_and_reads_as_the_single_calls_do(store_kind, shared_store):
    store = shared_store if shared_store is not None else MemoryStore()
    now = 7200.0
    store.update_session("s1", now, lambda state: (SessionState("s1", tenant="t"), None))
    store.breaker_force("b1", BreakerConfig(), now, BreakerStateName.FORCED_OPEN)
    spends = [SpendAdd("t:f", 10, 0.5, 3600.0), SpendAdd("t", 3, 0.25, 60.0)]
    read = store.read_many(now, spends, ["s1", "nobody"], ["b1", "never"])
    assert read.spent == [(10, 0.5), (3, 0.25)]
    assert isinstance(read.sessions[0], SessionState) and read.sessions[0].tenant == "t" and read.sessions[1] is None
    assert read.breakers[0] is not None and read.breakers[0].state is BreakerStateName.FORCED_OPEN and read.breakers[1] is None
    assert store.read_many(now + 1, spends[:1], [], []).spent == [(20, 1.0)]  # the same window, added to
    assert store.add_spend("t", 1, 0.0, 60.0, now + 1) == (4, 0.25)
    assert store.read_many(now + 60, spends[1:], [], []).spent == [(3, 0.25)]  # the next window
    assert store.read_many(now, [], [], []) == ([], [], [])


def _bump(key: str, interfere: Any = None) -> Any:
    """An update that counts in `created_s`; `interfere` runs once, the first time it decides."""

    def fn(state: object | None) -> tuple[SessionState, None]:
        nonlocal interfere
        if interfere is not None:
            interfere, run = None, interfere
            run()
        s = state if isinstance(state, SessionState) else SessionState(key, tenant="t")
        s.created_s += 1
        return s, None

    return fn


def test_update_sessions_updates_each_as_update_session_does(store_kind, shared_store):
    store = shared_store if shared_store is not None else MemoryStore()
    now = 7200.0
    store.update_session("a", now, _bump("a"))
    store.update_sessions(now, [("a", _bump("a")), ("b", _bump("b")), ("c", lambda state: (None, None))])
    a, b = store.peek_session("a"), store.peek_session("b")
    assert isinstance(a, SessionState) and a.created_s == 2 and isinstance(b, SessionState) and b.created_s == 1
    assert store.peek_session("c") is None  # a change that writes nothing
    store.update_sessions(now, [])
    if store_kind in ("redis", "cluster"):
        # another writer between the batch's read and its write: that one is decided again, alone
        store.update_sessions(now, [("a", _bump("a", lambda: store.update_session("a", now, _bump("a")))), ("b", _bump("b"))])
        a, b = store.peek_session("a"), store.peek_session("b")
        assert isinstance(a, SessionState) and a.created_s == 4 and isinstance(b, SessionState) and b.created_s == 2
