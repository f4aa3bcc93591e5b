"""Config validation and event validation: clear errors, never a crash, never a silent allow."""

from __future__ import annotations

import math

import pytest
from conftest import call

from agent_breaker import AgentBreakerConfig, ConfigError, InvalidEventError, load_config, parse_config, parse_event


def test_shipped_defaults_are_valid_and_named():
    cfg = AgentBreakerConfig()
    assert cfg.mode == "enforce"
    assert cfg.identical_failure.max_failures == 3
    assert cfg.stuck_polling.max_polls == 15 and cfg.stuck_polling.window_s == 600
    assert cfg.token_velocity.max_tokens_per_s == 50_000 and cfg.token_velocity.window_s == 10
    assert cfg.budget.soft_limit_pct == 85
    assert cfg.step_limit.max_steps >= 150 and cfg.depth_limit.max_depth <= 6


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        ({"breaker": {"failure_rate_pct": 120}}, "breaker.failure_rate_pct"),
        ({"breaker": {"failure_rate_pct": 120}}, "120"),
        ({"breaker": {"open_s": 60, "max_open_s": 10}}, "max_open_s must be >= open_s"),
        ({"identical_call": {"max_repeats": 1}}, "identical_call.max_repeats"),
        ({"mode": "panic"}, "mode"),
        ({"modes": {"no_such_heuristic": "off"}}, "no_such_heuristic"),
        ({"budget": {"max_cost_usd": -1}}, "-1"),
        ({"budget": {"default_model": "gpt-x"}}, "default_model must be one of prices"),
        ({"breakr": {}}, "breakr"),
        ({"overrides": [{"tenant": "a", "settings": {"depth_limit": {"max_depth": -3}}}]}, "overrides[0]"),
        ({"receipts": {"reference_patterns": ["("]}}, "not a valid regex"),
    ],
)
def test_a_bad_value_fails_loudly_and_names_itself(data, fragment):
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert fragment in str(err.value)


def test_config_loads_from_a_nemo_config_yml(tmp_path):
    path = tmp_path / "config.yml"
    path.write_text("models: []\ncustom_data:\n  agent_breaker:\n    mode: observe\n    step_limit: {max_steps: 42}\n")
    cfg = load_config(path)
    assert cfg.mode == "observe" and cfg.step_limit.max_steps == 42


def test_config_loads_from_a_bare_yaml_block(tmp_path):
    path = tmp_path / "ab.yml"
    path.write_text("depth_limit:\n  max_depth: 2\n")
    assert load_config(path).depth_limit.max_depth == 2


def test_a_missing_or_broken_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yml")
    bad = tmp_path / "bad.yml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_a_config_folder_and_a_nemo_file_without_our_block_load_as_nemo_configs(tmp_path):
    (tmp_path / "config.yml").write_text("models: []\ncustom_data:\n  agent_breaker:\n    mode: observe\n")
    assert load_config(tmp_path).mode == "observe"  # the folder: its config.yml
    (tmp_path / "config.yml").write_text("models: []\ncolang_version: '2.x'\n")
    assert load_config(tmp_path) == load_config(tmp_path / "config.yml") == parse_config(None)  # the defaults
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no config.yml"):
        load_config(tmp_path / "empty")


@pytest.mark.parametrize("text", ["custom_data: [1]\n", "custom_data: 3\n", "[1, 2]\n"])
def test_a_nemo_config_of_the_wrong_shape_is_a_config_error(tmp_path, text):
    (tmp_path / "config.yml").write_text(text)
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(tmp_path)


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path):
    (tmp_path / "config.yml").write_bytes(b"mode: \xff\xfe\n")
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path)


def test_overrides_resolve_most_specific_last():
    cfg = parse_config(
        {
            "overrides": [
                {"feature": "f", "settings": {"step_limit": {"max_steps": 10}}},
                {"tenant": "t", "feature": "f", "settings": {"step_limit": {"max_steps": 20}}},
                {"tenant": "t", "settings": {"step_limit": {"max_steps": 30}}},
            ]
        }
    )
    assert cfg.resolve("t", "f", None).step_limit.max_steps == 20
    assert cfg.resolve("t", "g", None).step_limit.max_steps == 30
    assert cfg.resolve("u", "f", None).step_limit.max_steps == 10
    assert cfg.resolve("u", "g", None).step_limit.max_steps == cfg.step_limit.max_steps


@pytest.mark.parametrize(
    ("event", "fragment"),
    [
        ({"type": "tool_call", "session": "s", "args": {}}, "tool"),
        ({"type": "tool_call", "session": "s", "tool": "", "args": {}}, "tool"),
        ({"type": "tool_call", "session": "s", "tool": "t", "args": [1, 2]}, "args"),
        ({"type": "tool_call", "session": "s", "tool": "t", "input_tokens": -5}, "input_tokens"),
        ({"type": "tool_call", "session": "s", "tool": "t", "output_tokens": math.nan}, "output_tokens"),
        ({"type": "tool_call", "session": "s", "tool": "t", "cost_usd": math.inf}, "cost_usd"),
        ({"type": "tool_result", "session": "s", "tool": "t"}, "ok"),
        ({"type": "launch_missiles", "session": "s"}, "unknown event type; expected one of"),
        ({"session": "s", "tool": "t"}, "no 'type'"),
        ({"type": "tool_call", "session": "s", "tool": "t", "depth": -1}, "depth"),
    ],
)
def test_bad_events_get_a_clear_validation_error(event, fragment):
    with pytest.raises(InvalidEventError) as err:
        parse_event(event)
    assert fragment in str(err.value)


def test_a_non_object_event_is_refused():
    with pytest.raises(InvalidEventError, match="JSON object"):
        parse_event(["tool_call"])


def test_huge_or_unserializable_args_are_refused_not_allowed(engine):
    with pytest.raises(InvalidEventError, match="over the limit"):
        engine.check_tool_call(call("t", {"blob": "x" * 100_000}))
    with pytest.raises(InvalidEventError, match="NaN"):
        engine.check_tool_call(call("t", {"x": math.nan}))
    deep: dict = {}
    node = deep
    for _ in range(50):
        node["n"] = {}
        node = node["n"]
    with pytest.raises(InvalidEventError, match="deeper"):
        engine.check_tool_call(call("t", deep))


def test_an_event_without_session_uses_the_tenant_and_conversation_fingerprint(engine):
    ev = {"type": "tool_call", "tenant": "acme", "conversation": "first user message", "tool": "t", "args": {}}
    assert engine.check_tool_call(ev).allowed
    state = engine.store.peek_session(engine.session_key(parse_event(ev)))
    assert state is not None and state.key.startswith("acme\x1fconv:")
    assert "first user message" not in state.key
    other = engine.session_key(parse_event({**ev, "tenant": "globex"}))
    assert other != state.key  # another tenant's same conversation is another session
    with pytest.raises(InvalidEventError, match="session: an event needs a session id, or a conversation"):
        engine.check_tool_call({"type": "tool_call", "tool": "t", "args": {}})


def test_a_handler_refuses_an_event_of_another_type(engine):
    with pytest.raises(InvalidEventError, match="expected a tool_call event"):
        engine.check_tool_call({"type": "user", "session": "s", "text": "hi"})


def test_unknown_keys_are_ignored():
    ev = parse_event({"type": "user", "session": "s", "text": "hi", "x_custom": 1})
    assert ev.text == "hi"


@pytest.mark.parametrize(
    "settings",
    [
        {"storage": {"url": "redis://elsewhere:6379/0"}},
        {"sessions": {"ttl_s": 5}},
        {"fingerprint_secret": "per-tenant"},
        {"receipts": {"key_env": "OTHER_KEYS"}},
        {"receipts": {"dev_ephemeral_key": True}},
    ],
)
def test_process_level_settings_are_refused_inside_overrides(settings):
    with pytest.raises(ConfigError, match="process-level setting"):
        parse_config({"overrides": [{"tenant": "acme", "settings": settings}]})


def test_per_tenant_receipt_patterns_stay_allowed_in_overrides():
    cfg = parse_config({"overrides": [{"tenant": "acme", "settings": {"receipts": {"reference_patterns": [r"\bACME-\d+\b"]}}}]})
    assert cfg.resolve("acme", None, None).receipts.reference_patterns == (r"\bACME-\d+\b",)
