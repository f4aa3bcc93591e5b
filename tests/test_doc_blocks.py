"""The data blocks of the docs are what they claim: every YAML block is a config that loads (an
`agent_breaker` block, a NeMo `config.yml` holding one, or LiteLLM's proxy config naming our
guardrail), every JSON block parses, and the hooks settings shown are what `print-config`
prints."""

from __future__ import annotations

import importlib
import json

import pytest
import yaml
from test_doc_examples import FENCE, PAGES, ROOT

from agent_breaker.config import AgentBreakerConfig, parse_config
from agent_breaker.hooks import settings


def fenced(lang: str) -> list[tuple[str, str]]:
    """(page:line, code) of every `lang` block of the pages the doc runner reads."""
    found = []
    for page in PAGES:
        text = (ROOT / page).read_text()
        for m in FENCE.finditer(text):
            if m.group(1) == lang:
                found.append((f"{page}:{text.count(chr(10), 0, m.start()) + 1}", m.group(2)))
    return found


@pytest.mark.parametrize(("where", "code"), fenced("yaml"), ids=[w for w, _ in fenced("yaml")])
def test_each_yaml_block_is_a_config_that_loads(where, code):
    data = yaml.safe_load(code)
    assert isinstance(data, dict), where
    if "custom_data" in data:
        parse_config(data["custom_data"]["agent_breaker"])
    elif "guardrails" in data:  # LiteLLM's proxy config: its guardrail class must be ours and import
        for guardrail in data["guardrails"]:
            module, _, name = guardrail["litellm_params"]["guardrail"].rpartition(".")
            pytest.importorskip("litellm")
            assert getattr(importlib.import_module(module), name)
    else:
        assert set(data) <= set(AgentBreakerConfig.model_fields), (
            where,
            sorted(set(data) - set(AgentBreakerConfig.model_fields)),
        )
        parse_config(data)


@pytest.mark.parametrize(("where", "code"), fenced("json"), ids=[w for w, _ in fenced("json")])
def test_each_json_block_parses_and_hooks_settings_are_print_configs(where, code):
    data = json.loads(code)
    if isinstance(data, dict) and "hooks" in data:
        commands = json.dumps(data)
        agent = next(a for a in ("claude-code", "codex", "gemini-cli") if a in commands)
        server = "http://127.0.0.1:8000" if '"type": "http"' in commands else None
        assert data == settings(agent, server=server), where


def test_there_are_data_blocks_to_check():
    assert len(fenced("yaml")) >= 8 and len(fenced("json")) >= 3
