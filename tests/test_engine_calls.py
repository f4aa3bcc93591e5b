"""How much a tool call costs the engine's front and its store (issue 36): a call re-enters the
`Engine`'s own methods at most 3 times (the rest is in `_reads`, the deciders and `_apply`), and
makes a bounded number of store calls with every feature on: the global budget's tenant and
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
from agent_breaker.engine import _engine
from agent_breaker.store import MemoryStore

#: every method of the Store interface
STORE_METHODS = (
    "update_session",
    "peek_session",
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


def test_a_tool_call_makes_a_bounded_number_of_store_calls_with_every_feature_on(counted):
    engine, store = counted
    # check: 2 spend windows, the tool view, the tenant's effects (a mutating call), the
    # dependency's held state, the breaker, the family's streaks, the session; then the views it
    # changed (its effect in flight; the opening's tools, once, as it leaves its opening).
    # result: the session, the breaker's outcome, the tenant's effects (done)
    assert store_calls(engine, store) == [(7, 3), (8, 4), (7, 3), (8, 3), (7, 4), (5, 3)]
