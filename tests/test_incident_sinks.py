"""Incident sinks: the webhook (JSON with a Slack-compatible `text`), retries with backoff, a
bounded queue that never makes a decision wait, the JSON-lines file; then the real server
posting a runaway's trip and a breaker's opening to a local receiver."""

from __future__ import annotations

import json
import threading
import uuid

import pytest
from _receiver import Receiver, receiving
from conftest import CALL_ERROR, OUTAGE, call, run
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent_breaker import Engine, ReceiptKeys
from agent_breaker._sinks import QueuedSink, close_all, json_lines, sinks_for, slack_text, webhook
from agent_breaker.config import INCIDENT_WEBHOOK_ENV, ConfigError, parse_config
from agent_breaker.metrics import Metrics

SECRET = "SECRET-PAYLOAD-5d81e2"


def counted(telemetry: Metrics, sink: str, outcome: str) -> float:
    for family in text_string_to_metric_families(generate_latest(telemetry.registry).decode()):
        for s in family.samples:
            if s.name == "agent_breaker_incidents_total" and s.labels == {"sink": sink, "outcome": outcome}:
                return s.value
    return 0.0


def runaway(engine: Engine, clock, session: str = "s1", **tenant: str) -> None:
    """Identical failing calls with distinctive payload text until one is refused: the fourth is
    warned of (an incident of its own, severity warn) and runs, the fifth is refused. Two
    incidents per runaway: the warning, then the block."""
    for _ in range(3):
        run(
            engine,
            clock,
            "run_sql",
            {"q": SECRET},
            False,
            {"error": SECRET},
            error=CALL_ERROR,
            thought=SECRET,
            session=session,
            **tenant,
        )
    warned = run(
        engine,
        clock,
        "run_sql",
        {"q": SECRET},
        False,
        {"error": SECRET},
        error=CALL_ERROR,
        thought=SECRET,
        session=session,
        **tenant,
    )
    assert (warned.allowed, warned.heuristic, warned.advisory) == (True, "identical_failure", True)
    assert not engine.check_tool_call(call("run_sql", {"q": SECRET}, session=session, thought=SECRET, **tenant)).allowed


def test_the_webhook_gets_each_incident_as_json_with_slack_text_and_no_payload(make_engine, clock):
    telemetry = Metrics()
    with receiving() as receiver:
        sink = QueuedSink("webhook", webhook(receiver.url + "/hook", 5.0), metrics=telemetry)
        engine = make_engine(telemetry=telemetry, listeners=[sink])
        runaway(engine, clock)
        assert sink.flush(20)
        [warning, body] = receiver.json_bodies("/hook")
    assert (warning["kind"], warning["heuristic"], warning["severity"], warning["advisory"]) == (
        "trip",
        "identical_failure",
        "warn",
        True,
    )
    assert warning["counters"]["failures"] == 3
    assert warning["text"].startswith(":warning: agent-breaker warn identical_failure on run_sql (session s1)")
    assert (body["kind"], body["heuristic"], body["severity"], body["advisory"], body["session"], body["tool"]) == (
        "trip",
        "identical_failure",
        "block",
        False,
        "s1",
        "run_sql",
    )
    assert body["counters"]["failures"] == 4
    assert body["text"].startswith(":no_entry: agent-breaker block identical_failure on run_sql (session s1)")
    assert SECRET not in json.dumps([warning, body])
    assert counted(telemetry, "webhook", "delivered") == 2


def test_a_breaker_opening_and_closing_reach_the_webhook(make_engine, clock):
    with receiving() as receiver:
        sink = QueuedSink("webhook", webhook(receiver.url, 5.0))
        engine = make_engine({"breaker": {"open_s": 10.0, "half_open_probes": 1}}, listeners=[sink])
        for i in range(5):
            run(engine, clock, "fetch", {"n": i}, False, None, error=OUTAGE, session=f"s{i}")
        clock.advance(10.0)
        run(engine, clock, "fetch", {"n": 9}, True, {"ok": 1}, session="probe")
        assert sink.flush(20)
        events = [(b["event"], b["from"], b["to"]) for b in receiver.json_bodies() if b["kind"] == "breaker"]
        texts = [b["text"] for b in receiver.json_bodies() if b["kind"] == "breaker"]
    assert events == [
        ("breaker_opened", "closed", "open"),
        ("breaker_half_open", "open", "half_open"),
        ("breaker_closed", "half_open", "closed"),
    ]
    assert texts[0].startswith(":red_circle: agent-breaker: fetch breaker closed -> open")


def test_a_failing_receiver_is_retried_with_exponential_backoff(make_engine, clock):
    waits: list[float] = []
    telemetry = Metrics()
    with receiving(statuses=[503, 502, 200]) as receiver:
        sink = QueuedSink("webhook", webhook(receiver.url, 5.0), retries=3, backoff_s=0.5, sleep=waits.append, metrics=telemetry)
        runaway(make_engine(listeners=[sink]), clock)
        assert sink.flush(20)
        # the warning: two refusals, then delivered; the block: delivered at its first try
        assert len(receiver.requests) == 4
    assert waits == [0.5, 1.0]
    assert (counted(telemetry, "webhook", "delivered"), counted(telemetry, "webhook", "failed")) == (2, 0)


def test_a_receiver_that_keeps_failing_is_given_up_on_counted_and_logged(make_engine, clock, caplog):
    waits: list[float] = []
    telemetry = Metrics()
    with receiving(statuses=[500] * 10) as receiver:
        sink = QueuedSink(
            "webhook",
            webhook(receiver.url, 5.0),
            retries=4,
            backoff_s=1.0,
            max_backoff_s=3.0,
            sleep=waits.append,
            metrics=telemetry,
        )
        runaway(make_engine(listeners=[sink]), clock)
        assert sink.flush(20)
        assert len(receiver.requests) == 10  # five tries of the warning, five of the block
    assert waits == [1.0, 2.0, 3.0, 3.0] * 2  # doubled, then capped; each incident anew
    assert counted(telemetry, "webhook", "failed") == 2
    assert "incident sink webhook failed 5 times" in caplog.text
    assert "(1 undelivered so far)" in caplog.text and "(2 undelivered so far)" in caplog.text


def test_a_request_the_receiver_refuses_is_not_retried(make_engine, clock):
    telemetry = Metrics()
    with receiving(statuses=[400]) as receiver:
        sink = QueuedSink("webhook", webhook(receiver.url, 5.0), sleep=lambda s: None, metrics=telemetry)
        runaway(make_engine(listeners=[sink]), clock)
        assert sink.flush(20)
        assert len(receiver.requests) == 2  # the warning, refused once and not tried again; the block
    assert (counted(telemetry, "webhook", "failed"), counted(telemetry, "webhook", "delivered")) == (1, 1)


def test_a_hung_receiver_never_holds_a_decision_and_a_full_queue_drops_and_counts(make_engine, clock):
    gate = threading.Event()
    telemetry = Metrics()
    raised: list = []
    with receiving(gate=gate) as receiver:
        # a queue of 8: each tenant may hold 2 of it, so every runaway's warning and block fit
        sink = QueuedSink("webhook", webhook(receiver.url, 30.0), queue_size=8, metrics=telemetry)
        engine = make_engine(telemetry=telemetry, listeners=[raised.append, sink])
        runaway(engine, clock, "s0")
        assert receiver.arrived.wait(20)  # the sink's thread is now stuck in the receiver
        # every later trip is decided while the receiver holds the first one: nothing waits on it
        # (each runaway under a tenant of its own: more sessions of one tenant failing alike are
        # session_churn, cut at their first or second call)
        for n in range(1, 6):
            runaway(engine, clock, f"s{n}", tenant=f"t{n}")
        assert not receiver.requests  # still held: the decisions above finished without it
        gate.set()
        assert sink.flush(20)
        delivered = [(b["session"], b["severity"]) for b in receiver.json_bodies()]
    assert len(raised) == 12  # a warning and a block per runaway
    assert delivered == [(i.session, i.severity) for i in raised[:9]]  # the one in flight, then the queue's 8
    assert counted(telemetry, "webhook", "dropped") == 3
    assert counted(telemetry, "webhook", "delivered") == 9


def test_a_receiver_that_is_down_costs_decisions_nothing_and_is_counted(make_engine, clock):
    telemetry = Metrics()
    down = Receiver()
    url = down.url
    down.close()  # nothing listens there now: connection refused
    sink = QueuedSink("webhook", webhook(url, 2.0), retries=1, sleep=lambda s: None, metrics=telemetry)
    runaway(make_engine(listeners=[sink], telemetry=telemetry), clock)
    assert sink.flush(20)
    assert counted(telemetry, "webhook", "failed") == 2  # the warning and the block


def test_the_file_sink_appends_one_json_line_per_incident(make_engine, clock, tmp_path):
    path = tmp_path / "incidents.jsonl"
    sink = QueuedSink("file", json_lines(str(path)))
    engine = make_engine(listeners=[sink])
    runaway(engine, clock, "a")
    runaway(engine, clock, "b")
    assert sink.flush(20)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(d["session"], d["heuristic"], d["severity"]) for d in lines] == [
        ("a", "identical_failure", "warn"),
        ("a", "identical_failure", "block"),
        ("b", "identical_failure", "warn"),
        ("b", "identical_failure", "block"),
    ]
    assert SECRET not in path.read_text()


def test_config_and_environment_name_the_sinks(tmp_path):
    assert sinks_for(parse_config({}, environ={}).incidents, Metrics()) == []
    env = {INCIDENT_WEBHOOK_ENV: "http://127.0.0.1:9/hook"}
    telemetry = Metrics()
    [hook] = sinks_for(parse_config({}, environ=env).incidents, telemetry)
    assert hook.name == "webhook"
    assert sinks_for(parse_config({}, environ=env).incidents, telemetry) == [hook]  # engines of a process share one queue
    file_cfg = parse_config({"incidents": {"file": str(tmp_path / "i.jsonl"), "webhook": {"url_env": None}}}, environ=env)
    assert [s.name for s in sinks_for(file_cfg.incidents, telemetry)] == ["file"]
    with pytest.raises(ConfigError, match=rf"\${INCIDENT_WEBHOOK_ENV} must be an http:// or https:// URL"):
        parse_config({}, environ={INCIDENT_WEBHOOK_ENV: "file:///etc/passwd"})
    with pytest.raises(ConfigError, match=r"incidents.webhook.url: must be an http:// or https:// URL"):
        parse_config({"incidents": {"webhook": {"url": "file:///etc/passwd"}}}, environ={})
    with pytest.raises(ConfigError, match="process"):
        parse_config({"overrides": [{"tenant": "t", "settings": {"incidents": {"file": "x"}}}]})


def test_slack_text_is_text_not_markup():
    hostile = {
        "kind": "trip",
        "severity": "block",
        "heuristic": "identical_failure",
        "tool": "<!here>",
        "session": "<!channel> <https://evil.example|click here>",
        "tenant": "a&b",
        "reason": "r",
    }
    text = slack_text(hostile)
    assert "<!" not in text and "|click" in text and "<https" not in text
    assert "&lt;!channel&gt;" in text and "a&amp;b" in text


def test_replay_and_report_never_page_on_call(monkeypatch, tmp_path):
    from agent_breaker._replay import replay_engine, replay_lines
    from agent_breaker.config import AgentBreakerConfig
    from agent_breaker.report import observe

    trace = [
        json.dumps(e)
        for i in range(5)  # warned at the fourth call, cut at the fifth
        for e in (
            {"type": "tool_call", "ts": 10.0 * i, "session": "r", "call_id": f"c{i}", "tool": "run_sql", "args": {"q": 1}},
            {
                "type": "tool_result",
                "ts": 10.0 * i + 1,
                "session": "r",
                "call_id": f"c{i}",
                "tool": "run_sql",
                "ok": False,
                "error": "syntax error",
                "error_kind": "call",
            },
        )
    ]
    with receiving() as receiver:
        monkeypatch.setenv(INCIDENT_WEBHOOK_ENV, receiver.url)
        engine = replay_engine(AgentBreakerConfig(), incidents=True)
        [out], _ = replay_lines(trace, engine)
        assert out["tripped"]  # a trip that would have been posted, were replay wired to the sinks
        report = observe(iter(line.encode() for line in trace))
        assert report is not None
        # the control: a live one, its config read with the environment, posts
        live = Engine(parse_config({}), listeners=[], receipt_keys=ReceiptKeys.ephemeral())
        assert [s.name for s in live.listeners] == ["webhook"]
        close_all()
    assert receiver.requests == []


def test_slack_text_names_what_happened():
    assert (
        slack_text(
            {
                "kind": "trip",
                "severity": "warn",
                "heuristic": "token_velocity",
                "tool": None,
                "session": "s",
                "tenant": "acme",
                "reason": "fast",
            }
        )
        == ":warning: agent-breaker warn token_velocity (session s, tenant acme): fast"
    )


# ----------------------------------------------------------------------------- the real server

pytest.importorskip("nemoguardrails")


@pytest.mark.slow  # a subprocess or a server
def test_the_server_posts_a_runaway_and_a_breaker_opening_to_the_webhook_within_seconds():
    from _server import call as scall
    from _server import result as sresult
    from _server import start
    from agent_breaker.configs import config_path

    with receiving() as receiver:
        # the in-memory config alone: its escalations in this server's own file (the shipped
        # root would also relay the Redis config's outbox, which other processes may write)
        srv = start({INCIDENT_WEBHOOK_ENV: receiver.url + "/incidents"}, args=("--config", str(config_path("agent_breaker"))))
        try:
            s = f"w-{uuid.uuid4().hex[:8]}"
            for i in range(4):  # the fourth call is warned of and runs
                srv.verdicts(s, scall(i, args={"q": SECRET}), sresult(i, error=CALL_ERROR, payload={"e": SECRET}))
            assert not srv.verdicts(s, scall(4, args={"q": SECRET}))[0]["allowed"]
            tool = f"flaky_{uuid.uuid4().hex[:6]}"
            for i in range(5):
                srv.verdicts(f"o{i}-{s}", scall(i, tool, {"n": i}), sresult(i, tool, error=OUTAGE))
            assert receiver.wait_for(lambda: len(receiver.json_bodies("/incidents")) >= 4)
            bodies = receiver.json_bodies("/incidents")
        finally:
            srv.stop()
    trips = [b for b in bodies if b["kind"] == "trip"]
    opened = [b for b in bodies if b["kind"] == "breaker"]
    escalated = [b for b in bodies if b["kind"] == "escalation"]
    assert [(b["heuristic"], b["severity"], b["session"]) for b in trips] == [
        ("identical_failure", "warn", s),
        ("identical_failure", "block", s),
    ]
    # the runaway went to a human: the server's relay delivered the escalation from the outbox
    assert [(b["heuristic"], b["session_id"], b["status"]) for b in escalated] == [("identical_failure", s, "open")]
    assert [(b["event"], b["tool"]) for b in opened] == [("breaker_opened", tool)]
    assert all(b["text"] for b in bodies)
    assert SECRET.encode() not in receiver.raw()


# ----------------------------------------------------------------------------- floods


class _Item:
    def __init__(self, **d) -> None:
        self.d = d

    def to_dict(self) -> dict:
        return dict(self.d)


def _trip(tenant: str, session: str, heuristic: str = "identical_failure") -> _Item:
    return _Item(kind="trip", tenant=tenant, session=session, heuristic=heuristic, severity="block")


class _HeldReceiver:
    """Holds the first delivery until released; keeps what it got, in order."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.got: list[dict] = []

    def __call__(self, item: dict) -> None:
        self.gate.wait(20)
        self.got.append(item)


def test_a_tenants_flood_of_trips_never_displaces_another_tenants_breaker_incident():
    telemetry = Metrics()
    receiver = _HeldReceiver()
    sink = QueuedSink("webhook", receiver, queue_size=50, metrics=telemetry)
    for i in range(1_200):
        sink(_trip("mallory", f"junk-{i}"))
    sink(_Item(kind="breaker", tenant="acme", tool="payments_api", event="breaker_opened"))
    sink(_trip("acme", "real-1"))
    receiver.gate.set()
    assert sink.flush(20)
    kinds = [(d["kind"], d["tenant"]) for d in receiver.got]
    assert ("breaker", "acme") in kinds and ("trip", "acme") in kinds
    # the breaker's incident went out before the trips queued ahead of it (one was in flight)
    assert kinds.index(("breaker", "acme")) <= 1
    assert counted(telemetry, "webhook", "limited") > 0  # mallory past its allowance


def test_a_trip_repeating_within_the_dedup_window_is_counted_not_queued():
    now = [0.0]
    telemetry = Metrics()
    receiver = _HeldReceiver()
    receiver.gate.set()
    sink = QueuedSink("webhook", receiver, metrics=telemetry, clock=lambda: now[0])
    for _ in range(5):
        sink(_trip("acme", "s1"))
    sink(_trip("acme", "s1", "same_answer"))  # another heuristic: news
    now[0] = 61.0
    sink(_trip("acme", "s1"))  # past the window: sent again
    assert sink.flush(20)
    assert [d["heuristic"] for d in receiver.got] == ["identical_failure", "same_answer", "identical_failure"]
    assert counted(telemetry, "webhook", "deduped") == 4


def test_a_tenants_allowance_refills_with_time():
    now = [0.0]
    receiver = _HeldReceiver()
    receiver.gate.set()
    sink = QueuedSink("webhook", receiver, queue_size=10_000, clock=lambda: now[0])
    for i in range(150):
        sink(_trip("mallory", f"s{i}"))
    now[0] = 60.0  # a minute: 60 more
    for i in range(150, 300):
        sink(_trip("mallory", f"s{i}"))
    assert sink.flush(20)
    assert len(receiver.got) == 100 + 60
