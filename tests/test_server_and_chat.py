"""The real `nemoguardrails server` (through `agent-breaker serve`) over HTTP, and the real
`nemoguardrails chat` under a pseudo-terminal."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("nemoguardrails")

from _chat_cli import ChatCLI  # noqa: E402
from _ports import free_port  # noqa: E402
from _server import call, child_env, result, start  # noqa: E402
from agent_breaker.configs import ROOT, config_path  # noqa: E402


@pytest.fixture(scope="module")
def server():
    srv = start()  # no token given: the one it generates (read from its file)
    yield srv
    srv.stop()


def events(server, session, *evs):
    r = server.post("/v1/agent-breaker/events", {"config_id": "agent_breaker", "session_id": session, "events": list(evs)})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["session_id"] == session
    return body["events"]


def test_the_server_lists_the_shipped_configs(server):
    ids = {c["id"] for c in httpx.get(f"{server.base}/v1/agent-breaker/configs", headers=server.headers).json()["configs"]}
    assert {"agent_breaker", "agent_breaker_observe"} <= ids


def assert_warned(verdict):
    """A graduated heuristic's first trip: the call runs, the agent is told."""
    assert (verdict["allowed"], verdict["heuristic"], verdict["severity"]) == (True, "identical_failure", "warn"), verdict
    assert verdict["advisory"] is True, verdict
    assert verdict["observation"]["warning"] == "IDENTICAL_FAILURE" and "error" not in verdict["observation"]


def test_the_events_endpoint_warns_then_cuts_a_runaway_session(server):
    verdicts = []
    for i in range(5):
        verdicts += events(server, "runaway-1", call(i))
        if verdicts[-1]["allowed"]:
            verdicts += events(server, "runaway-1", result(i))
    calls = [v for v in verdicts if v["type"] == "ToolCallVerdict"]
    assert [v["allowed"] for v in calls] == [True, True, True, True, False]
    assert_warned(calls[3])
    assert calls[-1]["heuristic"] == "identical_failure" and calls[-1]["call_id"] == "c4"
    assert calls[-1]["advisory"] is False and calls[-1]["observation"]["error"] == "IDENTICAL_FAILURE"


def test_the_events_endpoint_leaves_a_legitimate_session_alone(server):
    verdicts = []
    for page in range(1, 13):
        verdicts += events(
            server,
            "legit-1",
            call(page, "list_orders", {"page": page}),
            result(page, "list_orders", ok=True, payload={"page": page, "orders": [page]}),
        )
    verdicts += events(server, "legit-1", {"type": "FinalAnswerProposed", "text": "Reviewed 12 pages of orders."})
    assert all(v.get("allowed", v.get("accepted")) for v in verdicts), verdicts
    assert len(verdicts) == 25


def test_the_events_endpoint_refuses_other_event_types(server):
    r = server.post("/v1/agent-breaker/events", {"session_id": "x", "events": [{"type": "UtteranceUserActionFinished"}]})
    assert r.status_code == 422 and "must be one of" in r.text


def test_stock_chat_completions_checks_tool_calls_passed_as_context(server):
    def check(i, evs):
        body = {
            "model": "any",
            "guardrails": {"config_id": "agent_breaker"},
            "messages": [{"role": "context", "content": {"agent_breaker_events": evs}}],
        }
        r = server.post("/v1/chat/completions", body)
        assert r.status_code == 200, r.text
        return json.loads(r.json()["choices"][0]["message"]["content"])["events"]

    sid = {"session_id": "cc-runaway"}
    out = []
    for i in range(5):
        # a tool of its own: the events-endpoint tests' failures are on run_sql's breaker,
        # which the chat-completions path shares (one engine per config, whatever the model)
        out += check(i, [{**call(i, "cc_sql"), **sid}, {**result(i, "cc_sql"), **sid}])
    calls = [v for v in out if v["type"] == "ToolCallVerdict"]
    # each request gets a fresh Colang state; the engine's session state persists
    assert [v["allowed"] for v in calls] == [True, True, True, True, False]
    assert_warned(calls[3])
    assert calls[-1]["heuristic"] == "identical_failure" and calls[-1]["advisory"] is False


def test_nemoguardrails_chat_shows_blocked_for_a_runaway_typed_by_hand():
    chat = ChatCLI(str(config_path()), child_env())
    try:
        assert chat.read_until(b"> ", 90), chat.tail(1000)
        failing = ['tool run_sql {"q": 1}', "result run_sql error relation orders does not exist"]
        for line in failing * 3:
            chat.says(line, "ALLOWED")
        # the fourth try is warned (it runs), the fifth is cut
        chat.says(failing[0], "ALLOWED identical_failure")
        chat.says(failing[1], "ALLOWED")
        chat.says('tool run_sql {"q": 1}', "BLOCKED")
        assert b"identical_failure" in chat.screen[chat.screen.rindex(b"BLOCKED") :]
    finally:
        chat.close()


def test_nemoguardrails_chat_without_a_receipt_key_says_so_in_one_line():
    env = {k: v for k, v in child_env().items() if k != "AGENT_BREAKER_RECEIPT_KEYS"}
    proc = subprocess.run(
        [sys.executable, "-m", "nemoguardrails", "chat", "--config", str(config_path())],
        input="",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("agent-breaker:")]
    assert "AGENT_BREAKER_RECEIPT_KEYS" in line


@pytest.mark.parametrize("command", [["-m", "nemoguardrails", "server"], ["-m", "agent_breaker.cli", "serve"]])
def test_a_server_on_the_root_without_a_receipt_key_stops_at_start_in_one_line(command):
    env = {k: v for k, v in child_env().items() if k != "AGENT_BREAKER_RECEIPT_KEYS"}
    argv = [sys.executable, *command, "--config", str(ROOT), "--port", str(free_port())]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("agent-breaker:")]
    # every config that enforces unverified_claim is named at once; the observing ones need no key
    assert line.startswith("agent-breaker: config agent_breaker, agent_breaker_redis, agent_breaker_v1: receipts need")
    assert "AGENT_BREAKER_RECEIPT_KEYS" in line


def test_the_root_check_reads_our_configs_as_nemo_does_and_leaves_others_alone(tmp_path, monkeypatch):
    import os
    from types import SimpleNamespace

    from agent_breaker.actions import init_root, root_problems

    from agent_breaker.config import ConfigError

    monkeypatch.delenv("AGENT_BREAKER_RECEIPT_KEYS", raising=False)
    monkeypatch.setattr(os, "_exit", lambda code: pytest.fail(f"init_root exited {code}"))
    ours = "from agent_breaker.actions import init  # noqa: F401\n"

    def folder(name: str, files: dict[str, str]) -> None:
        (tmp_path / name).mkdir()
        for file, text in files.items():
            (tmp_path / name / file).write_text(text)

    folder("their_bot", {"config.yml": "models: []\n"})  # a NeMo config of the user's own: not checked
    # ours, observing, its agent_breaker block in a second YAML file (NeMo merges every file)
    folder("observed", {"config.yml": "models: []\n", "guard.yml": "custom_data:\n  agent_breaker:\n    mode: observe\n"})
    (tmp_path / "observed" / "config.py").write_text(ours)
    app = SimpleNamespace(rails_config_path=str(tmp_path), state=SimpleNamespace())
    init_root(app)  # returns: nothing is missing
    folder("enforced", {"config.yml": "models: []\n", "config.py": ours})  # no block: the defaults, enforcing
    for root in (tmp_path, tmp_path / "enforced"):  # a folder of configs, or one config folder
        [line] = root_problems(root)
        assert line.startswith("agent-breaker: config enforced: receipts need a signing key"), line
    with pytest.raises(ConfigError, match="enforced: receipts need"):
        init_root(app)  # not NeMo's server (an app that embeds it): an error, not an exit
