"""The red team's attacks on the engine itself, on every storage backend (the contract suite's
`store_kind`): a caller's clock, results of calls never made, invalid strings, evasion by
spelling, random fields and fresh session ids, and sessions that grow without bound."""

from __future__ import annotations

import random
import secrets
import uuid

import pytest
from conftest import OUTAGE, call, final, result, run, size_test

from agent_breaker import InvalidEventError
from agent_breaker.store import codec


def loop_until_blocked(engine, clock, session="s1", tool="run_sql", args=None, n=3, **kw):
    """n identical failures, the warned repeat (identical_failure warns first: the call runs and
    fails once more), then the verdict on the next repeat: the cut."""
    for _ in range(n):
        run(engine, clock, tool, args or {"q": "SELECT 1"}, False, None, session=session, **kw)
    warned = run(engine, clock, tool, args or {"q": "SELECT 1"}, False, None, session=session, **kw)
    assert warned.allowed and warned.advisory and warned.heuristic == "identical_failure", warned
    return engine.check_tool_call(call(tool, args or {"q": "SELECT 1"}, session=session, **kw))


# ----------------------------------------------------------------------------- the caller's clock


def test_a_caller_ts_far_ahead_evicts_no_other_session(make_engine, clock):
    engine = make_engine({"sessions": {"ttl_s": 600}})
    assert loop_until_blocked(engine, clock, "victim").heuristic == "identical_failure"
    engine.check_tool_call(call("search", {"q": 1}, session="attacker", ts=1e12))
    assert not engine.check_tool_call(call("run_sql", {"q": "SELECT 1"}, session="victim")).allowed


def test_failures_stamped_far_ahead_open_the_breaker_for_its_interval_only(make_engine, clock):
    engine = make_engine()
    for i in range(5):
        clock.advance(1)
        v = engine.check_tool_call(call("flaky", {"i": i}, session=f"s{i}", ts=1e11))
        engine.record_tool_result(result("flaky", False, None, session=f"s{i}", call_id=v.call_id, ts=1e11, error=OUTAGE))
    refused = engine.check_tool_call(call("flaky", {"i": 9}, session="other", ts=1e11))
    assert refused.heuristic == "circuit_open" and refused.observation["retry_after_s"] <= 30
    clock.advance(31)
    assert engine.check_tool_call(call("flaky", {"i": 10}, session="probe", ts=0)).allowed  # a half-open probe


def test_probes_stamped_in_the_future_do_not_close_an_open_breaker(make_engine, clock):
    engine = make_engine()
    for i in range(5):
        run(engine, clock, "flaky", {"i": i}, False, None, session=f"s{i}", error=OUTAGE)
    for i in range(3):
        v = engine.check_tool_call(call("flaky", {"i": 20 + i}, session=f"p{i}", ts=clock.now() + 40))
        assert not v.allowed and v.heuristic == "circuit_open"


def test_replay_keeps_the_traces_own_clock(make_engine, clock):
    engine = make_engine(trust_event_time=True)
    for i in range(5):
        v = engine.check_tool_call(call("flaky", {"i": i}, session=f"s{i}", ts=100.0 + i))
        engine.record_tool_result(result("flaky", False, None, session=f"s{i}", call_id=v.call_id, ts=100.5 + i, error=OUTAGE))
    assert engine.check_tool_call(call("flaky", {"i": 9}, session="x", ts=110.0)).heuristic == "circuit_open"
    assert engine.check_tool_call(call("flaky", {"i": 9}, session="x", ts=200.0)).allowed  # its open interval passed


# ----------------------------------------------------------------------------- results pair with calls


def test_results_of_calls_never_allowed_count_toward_nothing(make_engine, clock):
    engine = make_engine()
    for i in range(10):
        v = engine.record_tool_result(result("victim_tool", False, None, session=f"a{i}", call_id=f"forged{i}"))
        assert not v.accepted and v.heuristic == "invalid_event"
    assert engine.operator.breaker_state("victim_tool").value == "closed"
    assert engine.store.peek_session("a0") is None  # not even a session was written
    assert engine.check_tool_call(call("victim_tool", {}, session="b")).allowed


def test_a_made_up_success_mints_no_receipt(make_engine, clock):
    engine = make_engine()
    v = engine.record_tool_result(result("wire_transfer", True, {"ref": "TX-99482"}, call_id="never"))
    assert not v.accepted and v.receipt is None
    verdict = engine.verify_final(final("Done: the transfer went through, reference TX-99482."))
    assert not verdict.allowed and verdict.heuristic == "unverified_claim"


def test_a_result_counts_once_and_only_for_its_own_tool(make_engine, clock):
    engine = make_engine()
    v = engine.check_tool_call(call("wire_transfer", {"to": "x", "amount": 5}, call_id="c1"))
    assert not engine.record_tool_result(result("send_email", True, {"ok": 1}, call_id="c1")).accepted
    assert engine.record_tool_result(result("wire_transfer", True, {"ref": "TX-12345"}, call_id=v.call_id)).receipt
    again = engine.record_tool_result(result("wire_transfer", True, {"ref": "TX-12345"}, call_id="c1"))
    assert not again.accepted and again.receipt is None


def test_a_result_of_a_blocked_call_is_refused(make_engine, clock):
    engine = make_engine()
    blocked = loop_until_blocked(engine, clock)
    assert not blocked.allowed
    v = engine.record_tool_result(result("run_sql", True, {"rows": []}, call_id="~99"))
    assert v.heuristic == "invalid_event"


# ----------------------------------------------------------------------------- invalid strings


@pytest.mark.parametrize(
    "event",
    [
        call("t", {"q": "\ud800"}),
        result("t", True, {"r": "\udc00"}, call_id="c1"),
        {"type": "tool_call", "session": "s\ud800", "tool": "t", "args": {}},
        {"type": "tool_call", "session": "s\x00", "tool": "t", "args": {}},
        {"type": "assistant", "session": "s1", "text": "a\ud800b"},
        {"type": "final", "session": "s1", "text": "\udfff"},
    ],
)
def test_invalid_strings_are_refused_before_any_state_changes(engine, event):
    if event["type"] == "tool_result":
        engine.check_tool_call(call("t", {}, call_id="c1"))
    before = engine.store.peek_session("s1")
    steps = None if before is None else before.spend.steps
    with pytest.raises(InvalidEventError) as err:
        engine.process(event)
    assert "\ud800" not in str(err.value) and "\udc00" not in str(err.value)
    after = engine.store.peek_session("s1")
    assert (None if after is None else after.spend.steps) == steps


def test_error_messages_never_repeat_payload(engine):
    secret = "PIN-4417-" + "z" * 300
    for event in (
        call("t", {"q": secret}, input_tokens=-1),
        {"type": "tool_call", "session": "s1", "tool": secret, "args": {}},
        {"type": "tool_call", "session": "s1", "tool": "t", "args": {"q": secret}, "thought": 5},
        {"type": secret[:40], "session": "s1"},
    ):
        with pytest.raises(InvalidEventError) as err:
            engine.process(event)
        assert "4417" not in str(err.value), str(err.value)


# ----------------------------------------------------------------------------- evasion


def test_a_random_salt_field_does_not_make_a_call_new(make_engine, clock):
    engine = make_engine()
    # seeded: a random hex token of all digits (1 in 2,000) is a number, not masked, by design
    rng = random.Random(20261130)
    salts = (lambda: f"{rng.getrandbits(64):016x}", lambda: str(uuid.UUID(int=rng.getrandbits(128), version=4)), rng.random)
    for n, salt in enumerate(salts):
        session = f"salt-{uuid.uuid4().hex[:6]}"
        query = f"pricing {n}"  # one query per session: the same call in new sessions is session_churn's
        verdicts = [
            run(engine, clock, "search", {"q": query, "salt": salt()}, True, {"hits": 0}, session=session) for _ in range(5)
        ]
        # the fourth call is warned (identical_call warns first), the fifth cut
        assert [(v.allowed, v.heuristic) for v in verdicts[-2:]] == [(True, "identical_call"), (False, "identical_call")], [
            v.heuristic for v in verdicts
        ]


def test_readable_ids_are_not_taken_for_random_values(make_engine, clock):
    engine = make_engine()
    for user in ("mia_li_3668", "sophia_silva_7557", "getUserById2024", "raj_sanchez_7340"):
        assert run(engine, clock, "get_user_details", {"user_id": user}, False, {"error": "not found"}).allowed


def test_invisible_characters_and_case_do_not_make_a_call_new(make_engine, clock):
    engine = make_engine()
    vs = [run(engine, clock, "run_sql", {"q": q}, False, None) for q in ("SELECT 1", "SEL\u200bECT 1", "select\u00a01")]
    warned = run(engine, clock, "run_sql", {"q": "ＳＥＬＥＣＴ 1"}, False, None)
    assert all(v.heuristic is None for v in vs)
    assert warned.allowed and warned.advisory and warned.heuristic == "identical_failure", warned
    v = run(engine, clock, "run_sql", {"q": "Select\u2060 1"}, False, None)
    assert not v.allowed and v.heuristic == "identical_failure", v


@pytest.mark.parametrize("spelling", ["run_ѕql", "ｒｕｎ＿ｓｑｌ", "Run_SQL", "run\u200b_sql", "rսn_sql"])
def test_look_alike_tool_names_are_the_same_tool(make_engine, clock, spelling):
    engine = make_engine()
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": 1}, False, None)
    # the look-alike continues the pattern: it is warned (the first trip), then cut
    warned = run(engine, clock, spelling, {"q": 1}, False, None)
    assert warned.allowed and warned.advisory and warned.heuristic == "identical_failure", warned
    v = engine.check_tool_call(call(spelling, {"q": 1}))
    assert not v.allowed and v.heuristic == "identical_failure"


def test_a_failing_call_over_fresh_session_ids_is_caught_by_the_tool_view(make_engine, clock):
    engine = make_engine()

    def inbox(session: str, agent: str = "mailer", folder: str = "inbox", tool: str = "check_inbox"):
        return run(engine, clock, tool, {"folder": folder}, False, None, error="mailbox is locked", **who(session, agent))

    def who(session: str, agent: str) -> dict:
        return {"session": session, "tenant": "acme", "agent": agent}

    verdicts = [inbox(f"fresh-{i}") for i in range(6)]
    heuristics = [v.heuristic for v in verdicts]
    assert "session_churn" in heuristics and heuristics.index("session_churn") == 3, heuristics
    # the view is the tenant's tool, not an agent: another agent id of the tenant making the same
    # call in a new session continues the chain (split identity is no escape)
    other_agent = inbox("x", agent="other")
    assert not other_agent.allowed and other_agent.heuristic == "session_churn", other_agent
    # a call that does not hold what the chain's calls kept, and another tool, are not held back
    assert inbox("y", folder="sent").allowed
    assert inbox("z", agent="other", tool="check_calendar").allowed


def test_the_same_successful_call_opening_many_sessions_is_never_churn(make_engine, clock):
    """Many users of one deployment open their sessions with the same lookup: not a retry."""
    engine = make_engine()
    for i in range(30):
        v = run(engine, clock, "check_inbox", {"folder": "inbox"}, True, {"messages": 0}, session=f"user-{i}", tenant="acme")
        assert v.allowed and v.heuristic is None, (i, v)


def test_a_failing_call_over_fresh_sessions_and_agent_ids_is_cut_at_the_failure_limit(make_engine, clock):
    """The same failure needs no more new sessions than a session needs tries (identical_failure's
    limit), whichever agent id each of them takes."""
    engine = make_engine()
    verdicts = [
        run(
            engine,
            clock,
            "fetch_report",
            {"report": "Q3"},
            False,
            None,
            error="report Q3 not found",
            session=f"retry-{i}",
            tenant="acme",
            agent=f"agent-{i}",
        )
        for i in range(4)
    ]
    assert [v.allowed for v in verdicts] == [True, True, True, False], verdicts
    assert verdicts[3].heuristic == "session_churn" and not verdicts[3].advisory
    # another tool of the tenant, and a call that does not hold the chain's value, are not held back
    assert run(
        engine, clock, "fetch_invoice", {"report": "Q3"}, False, None, error="no invoice", session="n1", tenant="acme"
    ).allowed
    assert run(engine, clock, "fetch_report", {"report": "Q2"}, True, {"rows": 4}, session="n2", tenant="acme").allowed


def test_parallel_runs_that_go_on_to_other_calls_are_no_churn(make_engine, clock):
    engine = make_engine()
    for i in range(30):  # the same first call in every run, then real work
        session = f"run-{i}"
        assert run(engine, clock, "ls", {"path": "/repo"}, True, {"files": ["a.py"]}, session=session, agent="coder").allowed
        assert run(engine, clock, "open_file", {"path": f"a{i}.py"}, True, {"text": i}, session=session, agent="coder").allowed


@pytest.mark.parametrize(
    "answer",
    [
        "Done, reference tx-99482.",
        "Done, reference TX–99482.",
        "Done, reference TX-\u200b99482.",
        "Done, reference TX 99482.",
        "Done, reference ТХ-99482.",  # Cyrillic T and X
    ],
)
def test_reference_ids_are_read_whatever_their_spelling(engine, answer):
    v = engine.verify_final(final(answer))
    assert not v.allowed and v.heuristic == "unverified_claim", answer


def test_look_alike_claim_verbs_are_read(engine, clock):
    engine.check_tool_call(call("wire_transfer", {"to": "acct", "amount": 10}))  # tried, never succeeded
    for text in ("I have trаnsferred the money.", "I have TRANSFERRED the money.", "I have trans\u00adferred the money."):
        v = engine.verify_final(final(text))
        assert not v.allowed and v.heuristic == "unverified_claim", text


def test_honest_answers_with_lower_case_numbers_are_not_taken_for_references(engine):
    for text in ("Here are the top-100 customers.", "Use windows-1252 encoding.", "It ran on covid-19 data in 2024."):
        assert engine.verify_final(final(text)).allowed, text


def test_a_reference_quoted_inside_a_result_sentence_may_be_cited(engine, clock):
    run(engine, clock, "wire_transfer", {"to": "acct", "amount": 10}, True, {"message": "Transfer booked under TX-55120."})
    assert engine.verify_final(final("The transfer is done: TX-55120.")).allowed


# ----------------------------------------------------------------------------- bounded sessions

#: the largest encoded session the caps allow (docs/configuration.md: "Sessions and what is kept")
MAX_SESSION_BYTES = 768 * 1024


@size_test
def test_a_session_cannot_grow_past_its_bound(make_engine, clock):
    engine = make_engine(
        {
            "step_limit": {"max_steps": 10**6},
            "budget": {"max_tokens": None, "max_cost_usd": None},
            "token_velocity": {"max_tokens_per_s": 1e12},
            "identical_call": {"max_repeats": 1000},
            "stuck_polling": {"max_polls": 1000},
        }
    )
    rng = random.Random(7)

    def words(n):
        return " ".join(f"w{rng.randrange(10**9)}" for _ in range(n))

    for t in range(300):  # every tool once: chains, keys, receipts, references
        clock.advance(1)
        v = engine.check_tool_call(call(f"create_{t}", {"q": words(300)}, thought=words(300)))
        engine.record_tool_result(
            result(f"create_{t}", True, {"ids": [f"ID-{rng.randrange(10**6)}" for _ in range(40)]}, call_id=v.call_id)
        )
    for t in range(100):  # failing calls and tools: each streak keeps its error's words
        clock.advance(1)
        v = engine.check_tool_call(call(f"fail_{t % 40}", {"q": words(300)}, thought=words(300)))
        engine.record_tool_result(result(f"fail_{t % 40}", False, None, error=words(400), call_id=v.call_id))

    def shell():  # a coding agent's longest lines: many commands, each naming many files
        line = " && ".join(f"pytest {'/'.join(words(3).split())}/t{rng.randrange(10**9)}.py " + words(40) for _ in range(20))
        return call("Bash", {"command": line + " > " + "/".join(words(60).split()) + ".py"})

    for _ in range(100):  # done_claim's record: commands and files named, every pool full
        clock.advance(1)
        v = engine.check_tool_call(shell())
        assert v.allowed, v.reason
        engine.record_tool_result(result("Bash", True, {"stdout": words(400)}, call_id=v.call_id))
    for _ in range(40):  # and calls left in flight
        clock.advance(1)
        assert engine.check_tool_call(shell()).allowed
    for t in range(200):  # calls left in flight
        clock.advance(1)
        engine.check_tool_call(call(f"send_{t}", {"q": words(300)}, thought=words(300)))
    for _ in range(100):
        engine.record_assistant({"type": "assistant", "session": "s1", "text": words(400)})
    state = engine.store.peek_session("s1")
    assert state.work is not None and len(state.work.names) == 512 and len(state.work.awaited) == 32
    size = len(codec.encode(state))
    assert size <= MAX_SESSION_BYTES, size


# ----------------------------------------------------------------------------- the fingerprint key


def test_a_fleet_shares_one_fingerprint_key_or_the_engine_refuses_to_start(monkeypatch, keys, shared_store, store_kind):
    from agent_breaker import ConfigError, Engine

    monkeypatch.delenv("AGENT_BREAKER_FINGERPRINT_SECRET", raising=False)
    monkeypatch.delenv("AGENT_BREAKER_RECEIPT_KEYS", raising=False)
    if shared_store is None:
        pytest.skip("an in-process store needs no fleet-wide key")
    # receipt keys are shared by the fleet: the fingerprint key is derived from the current one
    a = Engine(store=shared_store, receipt_keys=keys, listeners=[])
    b = Engine(store=shared_store, receipt_keys=keys, listeners=[])
    assert a.fingerprints.hash64("x") == b.fingerprints.hash64("x")
    with pytest.raises(ConfigError, match="AGENT_BREAKER_FINGERPRINT_SECRET"):
        Engine({"mode": "observe"}, store=shared_store, listeners=[])


def test_the_fingerprint_key_is_not_the_receipt_key(keys):
    from agent_breaker import Engine
    from agent_breaker._canonical import Fingerprinter

    engine = Engine(receipt_keys=keys, listeners=[])
    assert engine.fingerprints.hash64("x") != Fingerprinter(keys.keys[keys.current_id]).hash64("x")


def test_a_receipt_key_rotation_keeps_the_fingerprint_key_and_what_sessions_hold(monkeypatch):
    """A new signing key goes in front of the old ones: the fingerprints a fleet stored (the
    ledger's reference hashes among them) still compare, so receipted ids stay citable."""
    from agent_breaker import Engine, ReceiptKeys
    from agent_breaker.store import MemoryStore

    monkeypatch.delenv("AGENT_BREAKER_FINGERPRINT_SECRET", raising=False)
    old = ReceiptKeys.parse("k1:" + "ab" * 32, source="test")
    rotated = ReceiptKeys.parse("k2:" + "cd" * 32 + ",k1:" + "ab" * 32, source="test")
    store = MemoryStore()
    before = Engine(receipt_keys=old, listeners=[], store=store)
    v = before.check_tool_call({"session": "s1", "tool": "wire_transfer", "args": {"to": "A"}, "mutating": True})
    before.record_tool_result(
        {"session": "s1", "tool": "wire_transfer", "ok": True, "result": {"transfer_id": "TX-99482"}, "call_id": v.call_id}
    )
    after = Engine(receipt_keys=rotated, listeners=[], store=store)
    assert after.fingerprints.hash64("x") == before.fingerprints.hash64("x")
    assert after.verify_final({"session": "s1", "text": "Done: the transfer TX-99482 was sent."}).allowed


# ----------------------------------------------------------------------------- a second reader's findings


def test_made_up_tenants_features_and_agents_share_the_policies_that_exist(make_engine):
    engine = make_engine({"overrides": [{"tenant": "acme", "settings": {"step_limit": {"max_steps": 9}}}]})
    for i in range(200):
        engine.check_tool_call(call("t", {"i": i}, session=f"s{i}", agent=f"agent-{i}", feature=f"f{i}"))
    engine.check_tool_call(call("t", {}, session="a", tenant="acme", agent="x"))
    assert len(engine.policies._cache) == 2  # no override, and acme's


def test_ids_that_look_random_stay_distinct_calls(make_engine, clock):
    engine = make_engine()
    for _ in range(2):  # eight jobs, each polled twice while it runs: no job is stuck
        for job in range(8):
            v = run(engine, clock, "check_job_status", {"job_id": str(uuid.UUID(int=job + 1))}, True, {"state": "running"})
            assert v.allowed, v


def test_a_reference_that_looks_random_may_be_quoted(engine, clock):
    run(engine, clock, "create_order", {"item": "desk"}, True, {"order": "CAFE-202405170001", "ticket": "ACE-1234567890123"})
    assert engine.verify_final(final("Ordered: CAFE-202405170001, ticket ACE-1234567890123.")).allowed


def test_a_random_key_name_does_not_make_a_call_new(make_engine, clock):
    engine = make_engine()
    verdicts = [run(engine, clock, "search", {"q": "pricing", secrets.token_hex(16): 1}, True, {"hits": 0}) for _ in range(5)]
    assert verdicts[-1].heuristic == "identical_call"


@pytest.mark.parametrize("answer", ["Done: TX-\U0001d17399482.", "Done: TX\u02d799482.", "Done: TX-\ufff999482."])
def test_every_invisible_and_dash_character_is_read_through(engine, answer):
    assert engine.verify_final(final(answer)).heuristic == "unverified_claim", answer


def test_the_invisible_table_covers_every_format_character():
    import unicodedata

    from agent_breaker._text import _INVISIBLE

    missing = [hex(c) for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf" and not _INVISIBLE.match(chr(c))]
    assert missing == []


@pytest.mark.parametrize("spelling", ["run_sql ", " run_sql", "run_sql\u00a0"])
def test_spaces_around_a_tool_name_do_not_make_another_tool(make_engine, clock, spelling):
    engine = make_engine()
    for _ in range(3):
        run(engine, clock, "run_sql", {"q": 1}, False, None)
    assert engine.check_tool_call(call(spelling, {"q": 1})).heuristic == "identical_failure"


def test_polling_patterns_match_tool_names_whatever_their_case(make_engine):
    engine = make_engine({"stuck_polling": {"polling_tools": ["checkBuild", "*Status*"]}})
    p = engine.policies.get(None, None, None)
    assert p.polling(engine_tool("checkBuild")) and p.polling(engine_tool("getJobStatus"))


def engine_tool(name: str) -> str:
    from agent_breaker.events import parse_event

    return parse_event({"type": "tool_call", "session": "s", "tool": name}).tool


@pytest.mark.parametrize("sep", ["\u2028", "\u2029", "\x85", "\u200b", "\u202e"])
@pytest.mark.parametrize("field", ["session", "tenant", "agent", "feature"])
def test_an_id_an_operator_could_not_read_back_is_refused_before_anything_is_kept(make_engine, sep, field):
    """A session frozen for a human must be listed: an id the escalation queue cannot hold (a
    line or paragraph separator, a format character) is refused at the door."""
    engine = make_engine()
    event = {"type": "tool_call", "session": "s1", "tool": "t", "args": {}, field: f"x{sep}y"}
    with pytest.raises(InvalidEventError, match=field):
        engine.check_tool_call(event)
    assert engine.store.peek_session("s1") is None


def test_decoy_calls_cannot_push_a_failing_call_out_of_flight(engine, clock):
    """Each turn: the failing call, then 64 decoys left without results, then the failing
    call's result. The decoys cannot evict it: its failure counts, and the loop is cut."""
    verdicts = []
    for turn in range(6):
        clock.advance(1)
        failing = engine.check_tool_call(call("run_sql", {"q": "SELECT 1"}, call_id=f"f{turn}"))
        verdicts.append(failing)
        decoys = [engine.check_tool_call(call("noop", {"n": i}, call_id=f"d{turn}-{i}")) for i in range(64)]
        assert not failing.allowed or any(d.heuristic == "invalid_event" for d in decoys)  # past the in-flight cap
        if failing.allowed:
            out = engine.record_tool_result(result("run_sql", False, None, call_id=f"f{turn}", error="syntax error"))
            assert out.accepted
    assert [v.allowed for v in verdicts][:4] == [True] * 4 and not verdicts[4].allowed, verdicts


def test_calls_that_never_answered_are_taken_as_lost_and_free_their_place(make_engine, clock):
    engine = make_engine()
    for i in range(64):
        assert engine.check_tool_call(call("fire", {"n": i})).allowed  # results never reported
    assert engine.check_tool_call(call("fire", {"n": 64})).heuristic == "invalid_event"
    clock.advance(121)  # past duplicate_mutation.in_flight_s
    assert engine.check_tool_call(call("fire", {"n": 65})).allowed
