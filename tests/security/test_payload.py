"""No payload anywhere: distinctive strings sent through every entry point (the engine, replay,
the events endpoint, the chat-completions path, the chat CLI, the Redis config) are found in no
log line (at DEBUG), no stored state, no Redis key or value, and no object the process keeps
between requests (caches, Colang states): the whole heap is searched after the requests."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import subprocess
import sys
import time
import types
import uuid

import pytest

pytest.importorskip("nemoguardrails")
httpx = pytest.importorskip("httpx")

from _chat_cli import ChatCLI  # noqa: E402
from _receiver import Receiver  # noqa: E402
from _server import TOKEN, call, child_env, result, start  # noqa: E402
from agent_breaker.configs import config_path  # noqa: E402
from conftest import REDIS_URL, redis_or_skip  # noqa: E402


def _marker() -> str:
    # built at run time, so no constant of this module holds it whole
    return "zq" + "Payload" + "Mark" + str(7700 + 31)


def _forms(marker: str) -> list[str]:
    return [marker, marker.lower(), marker.upper()]


def _payload_events(marker: str) -> list[dict]:
    """Colang-protocol events whose every payload field holds the marker."""
    return [
        {"type": "UserTurn", "text": f"please look up {marker}"},
        call(1, "search", {"q": f"find {marker} now", "iban": f"DE{marker}"}, thought=f"I will search for {marker}"),
        result(1, "search", ok=True, payload={"hits": [f"{marker} found", {"deep": {"x": marker}}]}),
        call(2, "wire_transfer", {"to": marker, "amount": 5}),
        result(2, "wire_transfer", ok=False, payload={"error": f"{marker} rejected"}),
        {**call(3, "wire_transfer", {"to": marker, "amount": 5})},
        {**result(3, "wire_transfer", ok=False, payload=None), "error": f"failed for {marker}"},
        {"type": "AssistantTurn", "text": f"I keep trying {marker}", "input_tokens": 10},
        {"type": "FinalAnswerProposed", "text": f"Transferred the money to {marker}, ref TX-{7731}"},
        # invalid events: their errors must not repeat the payload either
        {"type": "ToolCallRequested", "call_id": "bad", "tool_name": "t", "tool_args": {"q": marker}, "input_tokens": -1},
        {"type": "ToolCallRequested", "call_id": "bad2", "tool_name": f"tool-{marker}" * 20, "tool_args": {}},
    ]


def _trace_events(marker: str) -> list[dict]:
    """The same, in the trace format, plus a looping session that trips and logs incidents."""
    out = []
    for i in range(4):
        out.append(
            {
                "session": "loop",
                "type": "tool_call",
                "tool": "run_sql",
                "args": {"q": marker},
                "call_id": f"c{i}",
                "thought": marker,
            }
        )
        out.append(
            {"session": "loop", "type": "tool_result", "tool": "run_sql", "call_id": f"c{i}", "ok": False, "error": marker}
        )
    out.append({"session": "loop", "type": "final", "text": f"Done {marker} TX-77310"})
    out.append({"session": "bad", "type": "tool_call", "tool": "t", "args": {"q": marker}, "input_tokens": -1})
    return out


def _found_in(text: str, marker: str) -> bool:
    return any(form in text for form in _forms(marker))


def _heap_holders(marker: str, keep: set[int]) -> list[str]:
    """Objects alive in this process that hold a string with the marker (frames aside: the
    test's own locals), as type names."""
    gc.collect()
    forms = [f.encode() for f in _forms(marker)]
    holders: list[str] = []
    keep = keep | {id(forms), id(holders)}
    for obj in gc.get_objects():
        if isinstance(obj, (types.FrameType, types.FunctionType, types.CodeType)) or id(obj) in keep:
            continue
        for ref in gc.get_referents(obj):
            if type(ref) is str and len(ref) >= 10 and _found_in(ref, _marker()):
                holders.append(f"{type(obj).__name__}: {ref[:80]!r}")
            elif type(ref) in (bytes, bytearray) and any(f in ref for f in forms):
                holders.append(f"{type(obj).__name__}: bytes")
    return holders


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append(self.format(record))
        except Exception:  # a record that cannot format is still a record
            self.lines.append(repr(record.msg))


@pytest.fixture
def all_logs():
    """Every log record of this process at DEBUG, formatted with its traceback."""
    handler = _Collect()
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    old = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler.lines
    finally:
        root.removeHandler(handler)
        root.setLevel(old)


def test_the_engine_keeps_and_logs_no_payload(make_engine, clock, all_logs, store_kind, shared_store):
    marker = _marker()
    from agent_breaker.protocol import BY_COLANG, to_engine_event

    engine = make_engine(listeners=None)  # the default listener: incident JSON lines on the log
    for event in _payload_events(marker):
        clock.advance(1)
        kind = BY_COLANG[event["type"]]
        try:
            engine.process({**to_engine_event(kind, event), "session": "s1"})
        except Exception as exc:  # invalid events raise; their message is checked below
            all_logs.append(str(exc))
    for line in all_logs:
        assert not _found_in(line, marker), line
    if store_kind == "sqlite":
        # the file, its write-ahead log and its shared memory, every byte
        for part in shared_store.path.parent.glob(shared_store.path.name + "*"):
            assert not _found_in(part.read_bytes().decode("utf-8", "replace"), marker), part
    elif shared_store is not None:
        for key in shared_store.redis.scan_iter(match=f"{shared_store.prefix}:*"):
            assert not _found_in(key.decode("utf-8", "replace"), marker)
            value = shared_store.redis.get(key) if shared_store.redis.type(key) == b"string" else b""
            assert not _found_in((value or b"").decode("utf-8", "replace"), marker), key
    del event
    assert _heap_holders(marker, keep=set()) == []


def test_replay_prints_no_payload(tmp_path):
    marker = _marker()
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(e) for e in _trace_events(marker)) + "\n")
    proc = subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", "replay", str(trace), "--incidents", "-"],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert '"tripped": true' in proc.stdout and "identical_failure" in proc.stderr  # it did run and trip
    assert not _found_in(proc.stdout + proc.stderr, marker)


@pytest.fixture(scope="module")
def debug_server():
    redis_or_skip()
    url = REDIS_URL.rsplit("/", 1)[0] + "/12"
    # every output an operator reads: incidents posted to a webhook, spans exported over OTLP
    receiver = Receiver()
    env = {
        "AGENT_BREAKER_API_TOKEN": TOKEN,
        "REDIS_URL": url,
        "AGENT_BREAKER_INCIDENT_WEBHOOK": receiver.url + "/incidents",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    srv = start(env, token=TOKEN, log_level="debug")
    yield srv, url, receiver
    srv.stop()
    receiver.close()
    import redis

    client = redis.Redis.from_url(url)
    keys = list(client.scan_iter(match="ab:*"))
    if keys:
        client.delete(*keys)


@pytest.mark.parametrize("config_id", ["agent_breaker", "agent_breaker_redis"])
def test_the_server_logs_and_stores_no_payload(debug_server, config_id):
    srv, url, receiver = debug_server
    marker = _marker()
    session = f"pay-{uuid.uuid4().hex[:8]}"
    tool = f"flaky_{uuid.uuid4().hex[:6]}"
    runaway = [
        e for i in range(4) for e in (call(10 + i, "run_sql", {"q": marker}, thought=marker), result(10 + i, error=marker))
    ]
    for i in range(5):  # an outage: a breaker opens
        down = result(20 + i, tool, error="connection refused", error_kind="dependency")
        assert (
            srv.events(f"{session}-o{i}", call(20 + i, tool, {"q": f"{marker}{i}"}), down, config_id=config_id).status_code == 200
        )
    # its own session: the payload events end in an unverified claim, which freezes theirs
    for event in runaway:
        assert srv.events(f"{session}-loop", event, config_id=config_id).status_code == 200
    for event in _payload_events(marker):
        r = srv.events(session, event, config_id=config_id)
        assert r.status_code in (200, 413, 422), r.text
        assert not _found_in(r.text, marker), r.text  # no verdict repeats the payload
    body = {
        "model": "m",
        "guardrails": {"config_id": config_id},
        "messages": [
            {
                "role": "context",
                "content": {"agent_breaker_events": [{**e, "session_id": session + "-cc"} for e in _payload_events(marker)[:9]]},
            }
        ],
    }
    r = srv.post("/v1/chat/completions", body)
    assert r.status_code == 200 and not _found_in(r.text, marker), r.text
    # a request the guard refuses: its body reaches no log either
    r = srv.post("/v1/agent-breaker/events", {"session_id": session, "events": [{"type": f"Bad{marker}"}]})
    assert r.status_code == 422 and not _found_in(r.text, marker)
    metrics = httpx.get(srv.base + "/metrics", headers=srv.headers, timeout=30).text
    assert 'verdict="blocked"' in metrics and not _found_in(metrics, marker)

    def arrived() -> tuple[list, list]:
        bodies = receiver.json_bodies("/incidents")
        return [b for b in bodies if b.get("session") == f"{session}-loop"], [b for b in bodies if b.get("tool") == tool]

    assert receiver.wait_for(lambda: all(arrived()) and any(p == "/v1/traces" for p, _ in receiver.requests))
    trips, opened = arrived()
    assert "identical_failure" in {b["heuristic"] for b in trips} and opened[0]["event"] == "breaker_opened"
    assert not _found_in(receiver.raw().decode("utf-8", "replace"), marker)  # webhook bodies and spans alike
    time.sleep(0.5)  # let the server flush its log file
    log = srv.log()
    assert "DEBUG" in log or "INFO" in log or "agent-breaker" in log
    assert not _found_in(log, marker), [line for line in log.splitlines() if _found_in(line, marker)][:5]
    import redis

    client = redis.Redis.from_url(url)
    for key in client.scan_iter(match="*"):
        assert not _found_in(key.decode("utf-8", "replace"), marker)
        if client.type(key) == b"string":
            assert not _found_in(client.get(key).decode("utf-8", "replace"), marker), key


def test_live_colang_state_between_requests_holds_no_payload(tmp_path, monkeypatch, all_logs):
    """The events endpoint and the chat-completions path in this process: after the requests,
    no object on the heap (Colang states, caches, tables) holds the payload."""
    monkeypatch.setenv("AGENT_BREAKER_RECEIPT_KEYS", "k1:" + "ef" * 32)
    from agent_breaker.configs import ROOT

    from agent_breaker.server import build_app

    marker = _marker()
    guard = build_app(ROOT, host="127.0.0.1", environ={"AGENT_BREAKER_API_TOKEN": TOKEN})
    headers = {"Authorization": f"Bearer {TOKEN}", "Host": "127.0.0.1"}

    async def send(marker: str) -> None:
        transport = httpx.ASGITransport(app=guard)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            for event in _payload_events(marker):
                r = await client.post("/v1/agent-breaker/events", json={"session_id": "live", "events": [event]}, headers=headers)
                assert r.status_code in (200, 413, 422)
            body = {
                "model": "m",
                "guardrails": {"config_id": "agent_breaker"},
                "messages": [
                    {
                        "role": "context",
                        "content": {
                            "agent_breaker_events": [{**e, "session_id": "live-cc"} for e in _payload_events(marker)[:9]]
                        },
                    }
                ],
            }
            r = await client.post("/v1/chat/completions", json=body, headers=headers)
            assert r.status_code == 200

    asyncio.run(send(marker))
    assert guard.app.state.agent_breaker_colang.states()  # live Colang states were kept
    for line in all_logs:
        assert not _found_in(line, marker), line
    assert _heap_holders(marker, keep=set()) == []


def test_the_chat_cli_shows_no_payload_in_its_verdicts():
    marker = _marker()
    chat = ChatCLI(str(config_path()), child_env())
    try:
        assert chat.read_until(b"> ", 90), chat.tail(1000)
        lines = [f'tool run_sql {{"q": "{marker}"}}', f"result run_sql error {marker}"] * 3 + [
            f'tool run_sql {{"q": "{marker}"}}',
            f"tool bad {{not json {marker}",
            f"final Transferred to {marker}",
        ]
        for line in lines:
            chat.says(line, "ED")  # ALLOWED / BLOCKED
        text = chat.screen.decode(errors="replace")
        verdict_lines = [ln for ln in text.splitlines() if "ALLOWED" in ln or "BLOCKED" in ln]
        assert any("identical_failure" in ln for ln in verdict_lines)
        for ln in verdict_lines:
            assert not _found_in(ln, marker), ln
    finally:
        chat.close()
