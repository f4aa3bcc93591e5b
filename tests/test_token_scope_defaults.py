"""A tenant's token is scoped by default: a tokens-file entry that lists no configs uses only the
configs that enforce every heuristic, and one that lists no agents or features names none that
picks an override of the config. A list in the entry widens it; a `*` token is the operator's,
unscoped. On the dispatch (every path decides through it), then through a real server."""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

pytest.importorskip("nemoguardrails")  # the server package builds NeMo's app

from agent_breaker.configs import config_path

from agent_breaker import Engine, ReceiptKeys
from agent_breaker import heuristics as H
from agent_breaker.dispatch import decide
from agent_breaker.protocol import BY_COLANG
from agent_breaker.server._auth import TokenScope

#: loosening overrides: another agent's (observe), and one of globex's alone
OVERRIDES = [
    {"agent": "batch", "settings": {"mode": "observe"}},
    {"tenant": "globex", "feature": "bulk", "settings": {"mode": "observe"}},
]


def engine(config: dict[str, Any]) -> Engine:
    return Engine(config, receipt_keys=ReceiptKeys("k1", {"k1": b"k" * 32}))


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:8]}"


def tool_call(**labels: str) -> dict[str, Any]:
    return {"type": "ToolCallRequested", "call_id": "c1", "tool_name": "search", "tool_args": {"q": "x"}, **labels}


def decided(config: dict[str, Any], scope: TokenScope, **labels: str) -> dict[str, Any]:
    event = {**tool_call(**labels), "session_id": sid()}
    return decide(engine(config), BY_COLANG["ToolCallRequested"], event, scope.caller)


@pytest.mark.parametrize(
    ("config", "loose"),
    [
        ({"mode": "observe"}, "mode observe"),
        ({"mode": "off"}, "mode off"),
        ({"modes": {"oscillation": "observe", "step_limit": "off"}}, "modes.oscillation observe"),
    ],
)
def test_a_tenants_token_that_lists_no_configs_may_not_use_one_that_does_not_enforce(config, loose):
    out = decided(config, TokenScope("acme"))
    assert not out["allowed"] and out["heuristic"] == H.INVALID_EVENT
    assert loose in out["reason"] and "list the config in the token's configs" in out["reason"], out["reason"]


def test_a_tenants_token_that_lists_no_configs_uses_one_that_enforces():
    assert decided({"mode": "enforce", "modes": {"oscillation": "enforce"}}, TokenScope("acme"))["allowed"]


@pytest.mark.parametrize(
    "scope",
    [TokenScope("acme", configs=frozenset({"agent_breaker_observe"})), TokenScope("*")],
    ids=["a tenant's token listing its configs", "the all-tenants token"],
)
def test_a_token_listing_its_configs_and_the_all_tenants_token_use_an_observe_config(scope):
    # the request guard holds a token that lists configs to its list: the dispatch checks no mode
    assert decided({"mode": "observe"}, scope)["allowed"]


@pytest.mark.parametrize(("label", "value"), [("agent", "batch"), ("feature", "bulk")])
def test_a_tenants_token_may_not_name_a_label_that_picks_an_override_it_was_not_granted(label, value):
    overrides = [*OVERRIDES, {"feature": "bulk", "settings": {"mode": "observe"}}]
    out = decided({"overrides": overrides}, TokenScope("acme"), **{label: value})
    assert not out["allowed"] and out["heuristic"] == H.INVALID_EVENT
    assert f"list it in the token's {label}s" in out["reason"], out["reason"]


@pytest.mark.parametrize(
    "labels",
    [{"agent": "planner"}, {"feature": "billing"}, {"feature": "bulk"}],
    ids=["an agent no override names", "a feature no override names", "a feature of another tenant's override"],
)
def test_a_tenants_token_names_labels_that_pick_no_override_of_its_tenant(labels):
    assert decided({"overrides": OVERRIDES}, TokenScope("acme"), **labels)["allowed"]


def test_a_tenants_token_may_not_name_a_label_of_its_own_tenants_override_unless_listed():
    overrides = [{"tenant": "acme", "agent": "batch", "settings": {"mode": "observe"}}]
    assert not decided({"overrides": overrides}, TokenScope("acme"), agent="batch")["allowed"]
    assert decided({"overrides": overrides}, TokenScope("globex"), agent="batch")["allowed"]  # not globex's
    listed = TokenScope("acme", agents=frozenset({"batch"}))
    assert decided({"overrides": overrides}, listed, agent="batch")["allowed"]


def test_listing_agents_widens_them_and_leaves_the_features_default():
    scope = TokenScope("acme", agents=frozenset({"batch"}))
    overrides = [*OVERRIDES, {"feature": "bulk", "settings": {"mode": "observe"}}]
    assert decided({"overrides": overrides}, scope, agent="batch")["allowed"]
    assert not decided({"overrides": overrides}, scope, feature="bulk")["allowed"]
    assert not decided({"overrides": overrides}, scope, agent="planner")["allowed"]  # a list is the whole list


def test_the_all_tenants_token_names_any_label():
    assert decided({"overrides": OVERRIDES}, TokenScope("*"), agent="batch")["allowed"]


def test_a_tokens_file_entry_without_lists_is_held_to_the_default_scope():
    for entry in ("acme", {"tenant": "acme"}, {"tenant": "acme", "hooks": True}):
        caller = TokenScope.read(entry, "entry").caller
        assert caller.enforcing_only and caller.listed_overrides_only, entry
    assert not TokenScope.read({"tenant": "acme", "configs": ["agent_breaker_observe"]}, "entry").caller.enforcing_only
    operator = TokenScope.read("*", "entry").caller
    assert not operator.enforcing_only and not operator.listed_overrides_only


# ----------------------------------------------------------------------------- a real server

httpx = pytest.importorskip("httpx")

OPERATOR = "operator-token-" + "a" * 24
ACME = "acme-token-" + "b" * 24
WIDE = "acme-wide-token-" + "c" * 24
ACME_HOOKS = "acme-hooks-token-" + "d" * 24
CODING = "acme-coding-token-" + "e" * 24
TOKENS = {
    OPERATOR: "*",
    ACME: "acme",
    WIDE: {"tenant": "acme", "configs": ["agent_breaker", "agent_breaker_observe"], "agents": ["batch"]},
    ACME_HOOKS: {"tenant": "acme", "hooks": True},
    CODING: {"tenant": "acme", "configs": ["coding_agent"], "hooks": True},
}


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Any]:
    """The shipped agent_breaker (with OVERRIDES), agent_breaker_observe and coding_agent."""
    from _server import start

    root = tmp_path_factory.mktemp("configs")
    for name in ("agent_breaker", "agent_breaker_observe", "coding_agent"):
        shutil.copytree(config_path(name), root / name)
    spec = root / "agent_breaker" / "config.yml"
    config = yaml.safe_load(spec.read_text())
    config["custom_data"]["agent_breaker"]["overrides"] = OVERRIDES
    spec.write_text(yaml.safe_dump(config))
    tokens = root / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    srv = start({"AGENT_BREAKER_API_TOKENS_FILE": str(tokens)}, args=("--config", str(root)), token=OPERATOR)
    try:
        yield srv
    finally:
        srv.stop()


def verdict(server: Any, token: str, config_id: str, **labels: str) -> dict[str, Any]:
    r = server.events(sid(), tool_call(**labels), config_id=config_id, headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    [out] = r.json()["events"]
    return out


def test_a_tenants_token_is_refused_the_observe_config_on_every_path(server):
    out = verdict(server, ACME, "agent_breaker_observe")
    assert not out["allowed"] and out["heuristic"] == H.INVALID_EVENT and "mode observe" in out["reason"], out
    check = server.post(
        "/v1/agent-breaker/check",
        {"config_id": "agent_breaker_observe", "session_id": sid(), "event": tool_call()},
        headers={"Authorization": f"Bearer {ACME}"},
    )
    assert check.status_code == 422 and "list the config in the token's configs" in check.json()["reason"], check.text
    events = [{**tool_call(), "session_id": sid()}]
    body = {
        "model": "any",
        "guardrails": {"config_id": "agent_breaker_observe"},
        "messages": [{"role": "context", "content": {"agent_breaker_events": events}}],
    }
    chat = server.post("/v1/chat/completions", body, headers={"Authorization": f"Bearer {ACME}"})
    assert chat.status_code == 200, chat.text
    [out] = json.loads(chat.json()["choices"][0]["message"]["content"])["events"]
    assert not out["allowed"] and out["heuristic"] == H.INVALID_EVENT, out
    assert verdict(server, ACME, "agent_breaker")["allowed"]


def test_a_token_listing_the_observe_config_and_the_operators_use_it(server):
    for token in (WIDE, OPERATOR):
        assert verdict(server, token, "agent_breaker_observe")["allowed"], token


def test_a_tenants_token_may_not_borrow_another_agents_override_over_http(server):
    refused = verdict(server, ACME, "agent_breaker", agent="batch")
    assert not refused["allowed"] and "list it in the token's agents" in refused["reason"], refused
    assert verdict(server, ACME, "agent_breaker", agent="planner")["allowed"]
    assert verdict(server, ACME, "agent_breaker", feature="bulk")["allowed"]  # globex's override only
    for token in (WIDE, OPERATOR):
        assert verdict(server, token, "agent_breaker", agent="batch")["allowed"], token


def test_a_tenants_hooks_token_uses_the_coding_agent_config_only_once_it_is_listed(server):
    """The shipped coding_agent config reports oscillation and lifts the step and token ceilings:
    a tenant's token must list it, and a call it is refused for is denied, not let through."""
    payload = {
        "session_id": sid(),
        "transcript_path": "/home/dev/.agent/t.jsonl",
        "cwd": "/home/dev/repo",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "pytest -q"},
        "tool_use_id": "toolu_0001",
    }
    denied = httpx.post(
        server.base + "/v1/hooks/claude-code", json=payload, headers={"Authorization": f"Bearer {ACME_HOOKS}"}, timeout=60
    )
    assert denied.status_code == 200, denied.text
    decision = denied.json()["hookSpecificOutput"]
    assert decision["permissionDecision"] == "deny" and "modes." in decision["permissionDecisionReason"], decision
    allowed = httpx.post(
        server.base + "/v1/hooks/claude-code", json=payload, headers={"Authorization": f"Bearer {CODING}"}, timeout=60
    )
    assert allowed.status_code == 200 and allowed.json() == {}, allowed.text
