"""The engine hands sessions to humans (issue 12, item 3): a session-terminal trip or an
unverified claim escalates, the session is frozen (every call refused with the escalation id)
until an operator resolves it; resume lifts the freeze and restarts the loop streaks, abort keeps
it closed; past its tenant's cap of open escalations a session is frozen under the tenant's
newest one (counted). On both stores, with the SQLite queue."""

from __future__ import annotations

import uuid

import pytest
from conftest import CALL_ERROR, OUTAGE, REDIS_URL, call, redis_or_skip, run

from agent_breaker.escalations import SqliteEscalations
from agent_breaker.metrics import REGISTRY

SECRET = "SECRET-PAYLOAD-77e1"


@pytest.fixture(params=["sqlite", "redis"])
def queue_of(request, tmp_path):
    """Opens the escalation queue (the store's keyword arguments): the embedded SQLite file, and a
    fleet's Redis (a prefix of its own, deleted after)."""
    opened = []
    prefix = f"t{uuid.uuid4().hex[:10]}"
    if request.param == "redis":
        redis_or_skip()

    def open_queue(**kw):
        if request.param == "sqlite":
            store = SqliteEscalations(tmp_path / "escalations.db", **kw)
        else:
            from agent_breaker.escalations import RedisEscalations

            store = RedisEscalations(REDIS_URL, prefix=prefix, **kw)
        opened.append(store)
        return store

    yield open_queue
    for store in opened:
        store.close()
    if request.param == "redis":
        import redis

        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(match=f"{prefix}:*"))
        if keys:
            client.delete(*keys)
        client.close()


@pytest.fixture
def queue(queue_of):
    return queue_of()


def runaway(engine, clock, session: str = "s1"):
    """A failing call repeated until it is cut: three failures, a fourth that is only warned of
    (and runs, failing again), and the fifth, refused."""
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": SECRET}, False, None, error=CALL_ERROR, session=session, input_tokens=100)
    warned = run(engine, clock, "run_sql", {"q": SECRET}, False, None, error=CALL_ERROR, session=session, input_tokens=100)
    assert (warned.allowed, warned.heuristic, warned.advisory, warned.route) == (True, "identical_failure", True, None)
    return engine.check_tool_call(call("run_sql", {"q": SECRET}, session=session))


def test_a_loop_halt_escalates_and_freezes_until_a_human_resumes(make_engine, clock, queue):
    engine = make_engine(escalations=queue)
    v = runaway(engine, clock)
    assert (v.allowed, v.heuristic) == (False, "identical_failure")
    escalation_id = v.route["escalation_id"]
    assert v.route == {"tier": "escalate", "escalation_id": escalation_id}
    [record] = queue.list()
    assert (record.id, record.session, record.heuristic, record.status) == (escalation_id, "s1", "identical_failure", "open")
    # four failures: the warned fourth call ran (and was not escalated: one record only)
    assert record.counters["failures"] == 4 and record.spend.tokens == 400
    # the engine's keyed hash of the call, to match against the logs (16 hex digits, no payload)
    assert len(record.counters["call_hash"]) == 16 and int(record.counters["call_hash"], 16) >= 0
    assert [(t.tool, t.outcome) for t in record.tools] == [("run_sql", "blocked")]
    assert SECRET not in repr(record.to_dict()) and record.excerpts is None
    # frozen: any call, even another tool's, is refused with the escalation id
    other = engine.check_tool_call(call("search", {"q": 1}))
    assert (other.allowed, other.route) == (False, {"tier": "escalate", "escalation_id": escalation_id})
    assert escalation_id in other.reason and other.reason.startswith("session halted earlier")
    queue.resolve(escalation_id, "resume", "fixed the table name")
    assert engine.check_tool_call(call("search", {"q": 1}, call_id="after")).allowed
    # the streaks started over: the same failing call gets its three tries again
    assert engine.check_tool_call(call("run_sql", {"q": SECRET}, call_id="again")).allowed


def test_an_aborted_session_stays_closed(make_engine, clock, queue):
    engine = make_engine(escalations=queue)
    escalation_id = runaway(engine, clock).route["escalation_id"]
    queue.resolve(escalation_id, "abort")
    for i in range(3):
        v = engine.check_tool_call(call("search", {"q": i}, call_id=f"c{i}"))
        assert (v.allowed, v.route["escalation_id"]) == (False, escalation_id)
    # a user's new words do not reopen what an operator closed
    engine.record_user({"type": "user", "session": "s1", "text": "The table is called orders_2024, try that"})
    assert not engine.check_tool_call(call("search", {"q": 9})).allowed


def test_a_user_turn_with_news_resumes_a_loop_escalation_on_the_record(make_engine, clock, queue):
    engine = make_engine(escalations=queue)
    escalation_id = runaway(engine, clock).route["escalation_id"]
    engine.record_user({"type": "user", "session": "s1", "text": "The table is called orders_2024, try that"})
    assert engine.check_tool_call(call("run_sql", {"q": "orders_2024"})).allowed
    record = queue.get(escalation_id)
    assert (record.status, record.decision, record.note) == (
        "resumed",
        "resume",
        "a user turn with new content lifted the loop halt",
    )


def test_a_budget_halt_waits_for_the_operator(make_engine, clock, queue):
    engine = make_engine({"step_limit": {"max_steps": 3}}, escalations=queue)
    verdicts = [run(engine, clock, "search", {"q": i}, True, {"hits": [i]}) for i in range(4)]
    assert (verdicts[-1].allowed, verdicts[-1].heuristic) == (False, "step_limit")
    escalation_id = verdicts[-1].route["escalation_id"]
    engine.record_user({"type": "user", "session": "s1", "text": "Please keep going, it matters"})
    assert not engine.check_tool_call(call("search", {"q": 9})).allowed
    assert queue.get(escalation_id).status == "open"


def test_an_unverified_claim_escalates_and_freezes_the_session(make_engine, clock, queue):
    engine = make_engine(escalations=queue)
    run(engine, clock, "wire_transfer", {"to": "acct", "amount": 5}, False, None, error=OUTAGE)
    v = engine.verify_final({"type": "final", "session": "s1", "text": "Done: the transfer went through, reference TX-99482."})
    assert (v.allowed, v.heuristic) == (False, "unverified_claim")
    escalation_id = v.route["escalation_id"]
    frozen = engine.check_tool_call(call("wire_transfer", {"to": "acct", "amount": 5}))
    assert (frozen.allowed, frozen.heuristic, frozen.route["escalation_id"]) == (False, "escalated", escalation_id)
    assert queue.get(escalation_id).heuristic == "unverified_claim"


def test_a_tool_down_with_nothing_else_escalates_by_its_fallback(make_engine, clock, queue):
    engine = make_engine({"tools": {"enrich": {"fallback": {"escalate": True}}}, "breaker": {"open_s": 60.0}}, escalations=queue)
    for i in range(5):
        run(engine, clock, "enrich", {"n": i}, False, None, error=OUTAGE, session=f"down{i}")
    v = engine.check_tool_call(call("enrich", {"n": 9}, session="lead-42"))
    assert v.route["tier"] == "escalate" and v.observation["fallback"] == "escalate"
    [record] = queue.list()
    assert (record.session, record.heuristic, [t.outcome for t in record.tools]) == ("lead-42", "circuit_open", ["unavailable"])
    assert not engine.check_tool_call(call("search", {"q": 1}, session="lead-42")).allowed  # frozen


def test_excerpts_only_for_a_tenant_that_opted_in(make_engine, clock, queue):
    config = {"overrides": [{"tenant": "acme", "settings": {"escalations": {"excerpts": True, "max_excerpt_chars": 40}}}]}
    engine = make_engine(config, escalations=queue)
    for tenant in ("acme", "globex"):
        for _ in range(4):  # three failures and a fourth, warned of
            run(engine, clock, "run_sql", {"q": SECRET}, False, None, error=CALL_ERROR, session="s", tenant=tenant)
        assert not engine.check_tool_call(call("run_sql", {"q": SECRET}, session="s", tenant=tenant)).allowed
    records = {r.tenant: r for r in queue.list()}
    assert records["acme"].excerpts == ('{"q": "SECRET-PAYLOAD-77e1"}',)
    assert records["globex"].excerpts is None and SECRET not in repr(records["globex"].to_dict())


def test_past_its_tenants_cap_a_runaway_is_frozen_under_the_newest_escalation_counted_and_freed_with_it(
    make_engine, clock, queue_of
):
    queue = queue_of(max_open_per_tenant=1)
    engine = make_engine(escalations=queue)

    def collapsed() -> float:  # on the process registry; these sessions have no tenant
        return REGISTRY.get_sample_value("agent_breaker_escalations_collapsed_total", {"tenant": "none"}) or 0.0

    first = runaway(engine, clock, "first").route["escalation_id"]
    before = collapsed()
    v = runaway(engine, clock, "second")
    assert (v.allowed, v.heuristic, v.route) == (False, "identical_failure", {"tier": "escalate", "escalation_id": first})
    [record] = queue.list()
    assert (record.id, record.session, record.collapsed) == (first, "first", 1)
    assert queue.frozen(None, "second") == record and collapsed() == before + 1
    frozen = engine.check_tool_call(call("search", {"q": 1}, session="second"))
    assert (frozen.allowed, frozen.route["escalation_id"]) == (False, first)
    # its user's news lifts its own loop halt, and resumes nobody else's escalation
    engine.record_user({"type": "user", "session": "second", "text": "The table is called orders_2024"})
    assert engine.check_tool_call(call("search", {"q": 2}, session="second")).allowed
    assert queue.get(first).status == "open"
    assert not engine.check_tool_call(call("search", {"q": 3}, session="first")).allowed
    # the operator's decision on the escalation is that of the sessions collapsed onto it
    runaway(engine, clock, "third")
    assert queue.get(first).collapsed == 2 and collapsed() == before + 2
    queue.resolve(first, "resume", "checked the lot by hand")
    for session in ("first", "third"):
        assert engine.check_tool_call(call("search", {"q": 4}, session=session)).allowed


def test_replay_hands_no_one_a_case(tmp_path, monkeypatch):
    import json

    from agent_breaker._replay import replay_engine, replay_lines
    from agent_breaker.config import AgentBreakerConfig

    db = tmp_path / "replay.db"
    monkeypatch.setenv("AGENT_BREAKER_ESCALATIONS_DB", str(db))
    trace = [
        json.dumps(e)
        for i in range(5)  # warned at the fourth call, cut at the fifth
        for e in (
            {"type": "tool_call", "ts": 10.0 * i, "session": "r", "call_id": f"c{i}", "tool": "run_sql", "args": {"q": 1}},
            {"type": "tool_result", "ts": 10.0 * i + 1, "session": "r", "call_id": f"c{i}", "tool": "run_sql", "ok": False},
        )
    ]
    [out], _ = replay_lines(trace, replay_engine(AgentBreakerConfig()))
    assert out["tripped"] and not db.exists()


class FailingOnce:
    """The real queue behind a fault: its first escalate() fails as a busy or lost store would."""

    def __init__(self, store):
        self.store = store
        self.failed = False

    def escalate(self, record):
        from agent_breaker.escalations import EscalationStorageError

        if not self.failed:
            self.failed = True
            raise EscalationStorageError("database is locked")
        return self.store.escalate(record)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_store_that_fails_loses_no_escalation(make_engine, clock, queue):
    engine = make_engine(escalations=FailingOnce(queue))
    v = runaway(engine, clock)
    escalation_id = v.route["escalation_id"]  # the session was frozen in the same update as its halt
    assert queue.list() == []
    frozen = engine.check_tool_call(call("search", {"q": 1}))
    assert (frozen.allowed, frozen.route["escalation_id"]) == (False, escalation_id)
    # the record was written again at that call, under the id the session was frozen as
    [record] = queue.list()
    assert (record.id, record.heuristic, record.status) == (escalation_id, "identical_failure", "open")


def test_a_frozen_session_is_not_escalated_twice_nor_freed_by_its_user(make_engine, clock, queue):
    engine = make_engine(escalations=queue)
    escalation_id = runaway(engine, clock).route["escalation_id"]
    final = engine.verify_final({"type": "final", "session": "s1", "text": "Done, reference TX-99482."})
    assert (final.allowed, final.heuristic, final.route) == (False, "unverified_claim", None)  # checked, not escalated again
    assert [r.id for r in queue.list()] == [escalation_id]
    honest = engine.verify_final({"type": "final", "session": "s1", "text": "I could not run the query: the table is missing."})
    assert honest.allowed  # a frozen session may still tell the user the truth
    # the loop's escalation is the one a user's news resumes
    engine.record_user({"type": "user", "session": "s1", "text": "The table is called orders_2024"})
    assert queue.get(escalation_id).status == "resumed"


def test_an_operator_resuming_a_budget_halt_gives_a_fresh_budget(make_engine, clock, queue):
    engine = make_engine({"step_limit": {"max_steps": 3}}, escalations=queue)
    verdicts = [run(engine, clock, "search", {"q": i}, True, {"hits": [i]}) for i in range(4)]
    escalation_id = verdicts[-1].route["escalation_id"]
    queue.resolve(escalation_id, "resume", "approved three more steps")
    for i in range(3):
        assert run(engine, clock, "search", {"q": 10 + i}, True, {"hits": [i]}, call_id=f"r{i}").allowed
    assert not engine.check_tool_call(call("search", {"q": 99}, call_id="r9")).allowed  # the budget holds again
