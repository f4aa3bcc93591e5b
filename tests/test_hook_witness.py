"""The hook daemon's witness of each session's record: what it notices, what it forgets."""

from __future__ import annotations

from agent_breaker.hooks.witness import UNREAD, Witness

HALT = ("identical_failure", "Bash failed 5 times")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def witness(ttl_s: float = 100.0, capacity: int = 10) -> tuple[Witness, Clock]:
    clock = Clock()
    return Witness(ttl_s, clock, capacity), clock


def test_a_record_that_went_back_is_noticed_until_the_users_turn():
    w, _ = witness()
    w.saw("s", (7, HALT))
    assert w.refusal("s", lambda s: (7, HALT)) is None
    assert w.refusal("s", lambda s: (8, HALT)) is None  # moved on
    for gone in (None, (3, None), (0, None)):
        why = w.refusal("s", lambda s, gone=gone: gone)
        assert why is not None and "corrupt_state" in why and "had taken 7 steps" in why
    w.saw("s", (1, None))  # a result decided on the fresh record: still noticed
    assert w.refusal("s", lambda s: (1, None)) is not None
    w.saw("s", (1, None), users_turn=True)  # the user spoke: the record starts over
    assert w.refusal("s", lambda s: (1, None)) is None
    assert w.halt("s") is None


def test_nothing_is_read_for_a_session_never_seen_and_an_unread_store_changes_nothing():
    w, _ = witness()
    assert w.refusal("new", lambda s: (_ for _ in ()).throw(AssertionError("read"))) is None
    w.saw("s", (4, HALT))
    w.saw("s", UNREAD)
    assert w.halt("s") == HALT
    assert w.refusal("s", lambda s: UNREAD) is None


def test_the_halt_is_remembered_for_the_stores_idle_time_only():
    w, clock = witness(ttl_s=100.0)
    w.saw("s", (5, HALT))
    clock.now = 100.0
    assert w.halt("s") == HALT
    clock.now = 100.5  # the store forgets an idle session too
    assert w.halt("s") is None and w.refusal("s", lambda s: None) is None


def test_the_oldest_sessions_go_past_capacity():
    w, _ = witness(capacity=2)
    for name in ("a", "b", "c"):
        w.saw(name, (1, HALT))
    assert w.halt("a") is None and w.halt("b") == HALT and w.halt("c") == HALT


def test_a_result_that_comes_twice_refuses_the_sessions_calls_until_its_users_turn():
    w, _ = witness()
    w.answered("s", "toolu_1")
    w.answered("s", "toolu_2")
    w.answered("other", "toolu_1")  # ids are per session
    assert w.refusal("s", lambda s: None) is None and w.refusal("other", lambda s: None) is None
    w.answered("s", "toolu_1")  # made up from the agent's shell, then the agent's own
    why = w.refusal("s", lambda s: None)
    assert why is not None and "came twice" in why and "toolu_1" in why
    assert w.refusal("other", lambda s: None) is None
    w.saw("s", (3, None), users_turn=True)
    assert w.refusal("s", lambda s: (3, None)) is None
