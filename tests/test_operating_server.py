"""What an operator's tools talk to, against the real server (free loopback port, stopped by
PID), on the in-memory config and the Redis one: POST /v1/agent-breaker/check, the gateway's
answer (200 when the call may run, 429 with Retry-After and the X-Agent-Breaker headers when it
is refused), and GET /metrics."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("nemoguardrails")

from _server import TOKEN, Server, call, result, served_with_tenants, start  # noqa: E402
from agent_breaker.configs import config_path  # noqa: E402
from conftest import CALL_ERROR, OUTAGE  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from agent_breaker.protocol import TOOL_CALL_EVENT, to_colang_event  # noqa: E402

CHECK = "/v1/agent-breaker/check"
RESULT = "/v1/agent-breaker/result"
CONFIGS = ["agent_breaker", "agent_breaker_redis"]
ACME = "acme-token-" + "d" * 24


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    with served_with_tenants({TOKEN: "*", ACME: "acme"}, tmp_path_factory.mktemp("tokens"), 12) as srv:
        yield srv


def sid() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def check(server: Server, session: str, event: dict, config_id: str, **kw) -> httpx.Response:
    event = {k: v for k, v in event.items() if k != "type"}  # the type may be left out
    return server.post(CHECK, {"config_id": config_id, "session_id": session, "event": event}, **kw)


def run(server: Server, session: str, i: int, config_id: str, *, tool="run_sql", args=None, error=CALL_ERROR) -> None:
    """One call through the gateway check, and its (failing) result through the events endpoint."""
    r = check(server, session, call(i, tool, args), config_id)
    assert r.status_code == 200, r.text
    server.verdicts(session, result(i, tool, error=error), config_id=config_id)


def warned(server: Server, session: str, i: int, config_id: str, *, tool="run_sql") -> httpx.Response:
    """The repeat that trips identical_failure first: a warning (it warns before it cuts), so
    the gateway answers 200 and the call runs; its (failing) result goes through the events
    endpoint."""
    r = check(server, session, call(i, tool), config_id)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["allowed"], body["heuristic"], body["severity"]) == (True, "identical_failure", "warn"), body
    assert body["observation"]["warning"] == "IDENTICAL_FAILURE" and "error" not in body["observation"]
    assert "x-agent-breaker-heuristic" not in r.headers  # the 429 headers are for refusals
    server.verdicts(session, result(i, tool), config_id=config_id)
    return r


@pytest.mark.parametrize("config_id", CONFIGS)
def test_legitimate_calls_get_200_and_the_verdict(server, config_id):
    s = sid()
    for i in range(5):
        r = check(server, s, call(i, "search_docs", {"q": f"topic {i}"}), config_id)
        assert r.status_code == 200, r.text
        assert (r.json()["type"], r.json()["allowed"], r.json()["call_id"]) == ("ToolCallVerdict", True, f"c{i}")
        assert "x-agent-breaker-heuristic" not in r.headers
        server.verdicts(s, result(i, "search_docs", ok=True, payload={"hits": [i]}), config_id=config_id)


@pytest.mark.parametrize("config_id", CONFIGS)
def test_a_runaway_gets_429_with_the_heuristic_and_the_reason(server, config_id):
    s = sid()
    for i in range(3):
        run(server, s, i, config_id)
    warned(server, s, 3, config_id)
    r = check(server, s, call(4), config_id)
    assert r.status_code == 429, r.text
    assert r.headers["x-agent-breaker-heuristic"] == "identical_failure"
    assert r.headers["x-agent-breaker-reason"].startswith("run_sql failed 4 times")
    assert "retry-after" not in r.headers  # a loop halt has no time to wait for
    body = r.json()
    assert (body["allowed"], body["heuristic"], body["observation"]["error"]) == (False, "identical_failure", "IDENTICAL_FAILURE")


@pytest.mark.parametrize("config_id", CONFIGS)
def test_an_open_breaker_answers_429_with_retry_after(server, config_id):
    tool = f"flaky_{uuid.uuid4().hex[:6]}"
    for i in range(5):
        run(server, sid(), i, config_id, tool=tool, args={"n": i}, error=OUTAGE)
    r = check(server, sid(), call(9, tool), config_id)
    assert r.status_code == 429, r.text
    assert r.headers["x-agent-breaker-heuristic"] == "circuit_open"
    assert 1 <= int(r.headers["retry-after"]) <= 30
    assert r.json()["observation"]["retry_after_s"] <= int(r.headers["retry-after"])


def test_a_reason_with_text_beyond_ascii_makes_a_valid_header(server):
    s = sid()
    tool = "zähler_ß"
    for i in range(3):
        run(server, s, i, "agent_breaker", tool=tool)
    warned(server, s, 3, "agent_breaker", tool=tool)
    r = check(server, s, call(4, tool), "agent_breaker")
    assert r.status_code == 429
    assert r.headers["x-agent-breaker-reason"].isascii() and "\n" not in r.headers["x-agent-breaker-reason"]


def test_an_event_the_guard_cannot_read_is_422_not_429(server):
    r = check(server, sid(), {"call_id": "c1", "tool_name": "run_sql", "tool_args": "not an object"}, "agent_breaker")
    assert r.status_code == 422, r.text
    r = server.post(CHECK, {"session_id": sid(), "event": {**call(1), "type": "ToolResultReceived"}})
    assert r.status_code == 422 and "ToolCallRequested" in r.text
    r = server.post(CHECK, {"session_id": sid(), "events": [call(1)]})
    assert r.status_code == 422  # one event, under `event`


def test_the_check_needs_a_token_and_keeps_a_tenant_to_its_own(server):
    r = httpx.post(server.base + CHECK, json={"session_id": sid(), "event": call(1)}, timeout=30)
    assert r.status_code == 401
    r = check(server, sid(), {**call(1), "tenant": "globex"}, "agent_breaker", headers={"Authorization": f"Bearer {ACME}"})
    assert r.status_code == 403


@pytest.mark.parametrize("path", [CHECK, RESULT])
def test_the_gateway_paths_take_post_only(server, path):
    r = httpx.get(server.base + path, headers=server.headers, timeout=30)
    assert r.status_code == 405 and r.headers["allow"] == "POST", r.text


def report(server: Server, session: str, event: dict, config_id: str = "agent_breaker", **kw) -> httpx.Response:
    event = {k: v for k, v in event.items() if k != "type"}  # the type may be left out
    return server.post(RESULT, {"config_id": config_id, "session_id": session, "event": event}, **kw)


@pytest.mark.parametrize("config_id", CONFIGS)
def test_a_gateway_reports_results_without_the_events_endpoint_and_the_loop_is_cut(server, config_id):
    s = sid()
    query = {"q": f"select * from {s}"}  # a call of this session's own (other sessions' are another's)
    for i in range(5):
        r = check(server, s, call(i, "run_sql", query), config_id)
        if i < 4:
            assert r.status_code == 200, r.text  # the fourth runs under a warning
            r = report(server, s, result(i), config_id)
            assert r.status_code == 200, r.text
            body = r.json()
            assert (body["type"], body["call_id"], body["accepted"]) == ("ToolResultVerdict", f"c{i}", True), body
    assert (r.status_code, r.headers["x-agent-breaker-heuristic"]) == (429, "identical_failure")


def test_a_reported_mutation_gets_its_receipt(server):
    s = sid()
    assert check(server, s, call(1, "create_invoice", {"amount": 5}, mutating=True), "agent_breaker").status_code == 200
    r = report(server, s, result(1, "create_invoice", ok=True, payload={"invoice_id": "INV-20417"}, mutating=True))
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] and r.json()["receipt"]["tool"] == "create_invoice"


def test_a_result_of_no_call_in_flight_or_of_another_type_is_422(server):
    r = report(server, sid(), result(1))
    assert r.status_code == 422 and r.json()["heuristic"] == "invalid_event", r.text
    r = server.post(RESULT, {"session_id": sid(), "event": call(1)})
    assert r.status_code == 422 and "ToolResultReceived" in r.text
    r = httpx.post(server.base + RESULT, json={"session_id": sid(), "event": result(1)}, timeout=30)
    assert r.status_code == 401
    r = report(server, sid(), {**result(1), "tenant": "globex"}, headers={"Authorization": f"Bearer {ACME}"})
    assert r.status_code == 403


def decided(server: Server, heuristic: str, verdict: str = "blocked") -> float:
    r = httpx.get(server.base + "/metrics", headers=server.headers, timeout=30)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain"), r.text
    return sum(
        s.value
        for family in text_string_to_metric_families(r.text)
        for s in family.samples
        if s.name == "agent_breaker_decisions_total"
        and (s.labels["event"], s.labels["heuristic"], s.labels["verdict"]) == ("tool_call", heuristic, verdict)
    )


@pytest.mark.parametrize("config_id", CONFIGS)
def test_metrics_show_the_blocked_decisions_of_a_runaway(server, config_id):
    before = decided(server, "identical_failure"), decided(server, "identical_failure", "warned")
    s = sid()
    for i in range(3):
        run(server, s, i, config_id)
    warned(server, s, 3, config_id)
    for i in range(4, 6):
        assert check(server, s, call(i), config_id).status_code == 429
    assert decided(server, "identical_failure") - before[0] == 2
    assert decided(server, "identical_failure", "warned") - before[1] == 1


def test_metrics_need_the_token(server):
    assert httpx.get(server.base + "/metrics", timeout=30).status_code == 401


@pytest.mark.parametrize("config_id", CONFIGS)
def test_parallel_duplicate_transfers_through_the_gateway_run_once(server, config_id):
    s = sid()
    transfer = {"to": "ACC-2291", "amount": 500}
    answers = [check(server, s, call(i, "wire_transfer", transfer), config_id) for i in range(3)]
    assert [r.status_code for r in answers] == [200, 429, 429], [r.text for r in answers]
    assert {r.headers["x-agent-breaker-heuristic"] for r in answers[1:]} == {"duplicate_mutation"}
    # a reused call id while its call is in flight is refused too (an event the gateway cannot
    # take: 422), not taken over
    again = check(server, s, call(0, "delete_account", {"id": 1}), config_id)
    assert again.status_code == 422 and "still in flight" in again.text, again.text
    server.verdicts(s, result(0, "wire_transfer", ok=True, payload={"tx": "TX-1"}), config_id=config_id)
    # after the first answered, a repeat moves the amount again: refused (the agent asks the user)
    later = check(server, s, call(3, "wire_transfer", transfer), config_id)
    assert later.status_code == 429 and later.headers["x-agent-breaker-heuristic"] == "duplicate_mutation", later.text
    # a model step's calls, checked one after another once each answered: the repeat is refused
    rent = {"to": "ACC-7", "amount": 900}
    assert check(server, s, call(5, "wire_transfer", rent, turn="step-9"), config_id).status_code == 200
    server.verdicts(s, result(5, "wire_transfer", ok=True, payload={"tx": "TX-5"}), config_id=config_id)
    repeat = check(server, s, call(6, "wire_transfer", rent, turn="step-9"), config_id)
    assert repeat.status_code == 429 and repeat.headers["x-agent-breaker-heuristic"] == "duplicate_mutation"


def _trace_sessions(name: str) -> dict[str, list[dict]]:
    sessions: dict[str, list[dict]] = {}
    for line in (Path(__file__).parent / "traces" / name).read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        sessions.setdefault(event["session"], []).append(to_colang_event(event))
    return sessions


def _decision(verdict: dict) -> tuple:
    # what was decided; the texts may differ by what the clock read (token_velocity's rate),
    # and each run's escalation, session and receipts are its own
    route = verdict.get("route") or {}
    return tuple(verdict.get(k) for k in ("type", "call_id", "allowed", "accepted", "heuristic", "severity")) + (
        route.get("tier"),
        route.get("tool"),
    )


def _through_check(server: Server, session: str, events: list[dict]) -> list[dict]:
    """Each tool call through /check, the events between two calls through the events endpoint."""
    verdicts: list[dict] = []
    pending: list[dict] = []
    for event in [*events, None]:
        if event is not None and event["type"] != TOOL_CALL_EVENT:
            pending.append(event)
        if pending and (event is None or event["type"] == TOOL_CALL_EVENT or len(pending) == 100):
            verdicts += server.verdicts(session, *pending)
            pending = []
        if event is not None and event["type"] == TOOL_CALL_EVENT:
            r = check(server, session, event, "agent_breaker")
            assert r.status_code in (200, 422, 429), r.text
            verdicts.append(r.json())
    return verdicts


@pytest.mark.parametrize(("trace", "every"), [("synthetic-sample.jsonl", 3), ("real-swe-agent.jsonl", 1)])
def test_check_plus_events_decides_as_the_flows_alone(server, trace, every):
    # /check calls the config's engine directly; the events endpoint runs the flows: a run
    # whose calls go through /check gets the verdicts of the same run sent through the flows only
    # (of the synthetic sample, every third session: each family has several, and the suite's time is bounded)
    run = uuid.uuid4().hex[:8]
    # a tenant per path: its breakers are its own (keyed by tenant), as they would be on two servers
    for session, trace_events in list(_trace_sessions(trace).items())[::every]:
        events = [{**e, "tenant": f"flows-{run}"} for e in trace_events]
        flows = []  # the flows alone, event by event, in requests of at most 100 events (the server's limit)
        for i in range(0, len(events), 100):
            flows += server.verdicts(f"flows-{run}-{session}", *events[i : i + 100])
        gateway = _through_check(server, f"gateway-{run}-{session}", [{**e, "tenant": f"gateway-{run}"} for e in trace_events])
        assert [_decision(v) for v in gateway] == [_decision(v) for v in flows], session


def test_a_request_naming_no_config_is_for_the_only_one_served(tmp_path):
    folder = tmp_path / "solo"
    shutil.copytree(config_path("agent_breaker_observe"), folder)  # a name that is not the default
    scoped = "scoped-token-" + "f" * 24  # a token that may use this config alone
    (tmp_path / "tokens.json").write_text(json.dumps({TOKEN: "*", scoped: {"tenant": "acme", "configs": ["solo"]}}))
    srv = start({"AGENT_BREAKER_API_TOKENS_FILE": str(tmp_path / "tokens.json")}, args=("--config", str(folder)), token=TOKEN)
    try:
        session = sid()
        for token in (TOKEN, scoped):
            headers = {"Authorization": f"Bearer {token}"}
            event = {"call_id": f"c-{token[:4]}", "tool_name": "run_sql", "tool_args": {}}
            r = srv.post(CHECK, {"session_id": session, "event": event}, headers=headers)
            assert r.status_code == 200 and r.json()["allowed"], r.text
            r = srv.events(session, result(f"-{token[:4]}"), config_id=None, headers=headers)
            assert r.status_code == 200 and r.json()["events"][0]["accepted"], r.text
        r = srv.post(CHECK, {"config_id": "agent_breaker", "session_id": session, "event": call(2)})
        assert r.status_code == 404 and "solo" in r.text  # named, it must be served
    finally:
        srv.stop()
