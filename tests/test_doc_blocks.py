"""The data blocks of the docs are what they claim: every YAML block is a config that loads (an
`agent_breaker` block, a NeMo `config.yml` holding one, or LiteLLM's proxy config naming our
guardrail), every JSON block parses, and the hooks settings shown are what `print-config`
prints."""

from __future__ import annotations

import importlib
import json
import re

import pytest
import yaml
from _doc_runner import FENCE, PAGES, ROOT

from agent_breaker.config import load_config
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


YAML, JSON = fenced("yaml"), fenced("json")


@pytest.mark.parametrize(("where", "code"), YAML, ids=[w for w, _ in YAML])
def test_each_yaml_block_is_a_config_that_loads(where, code, tmp_path):
    data = yaml.safe_load(code)
    assert isinstance(data, dict), where
    if "guardrails" in data:  # LiteLLM's proxy config: its guardrail class must be ours and import
        for guardrail in data["guardrails"]:
            module, _, name = guardrail["litellm_params"]["guardrail"].rpartition(".")
            pytest.importorskip("litellm")
            assert getattr(importlib.import_module(module), name)
    else:  # the agent_breaker tree (no key it does not know), or a NeMo config.yml holding it
        (tmp_path / "block.yml").write_text(code)
        load_config(tmp_path / "block.yml")


@pytest.mark.parametrize(("where", "code"), JSON, ids=[w for w, _ in JSON])
def test_each_json_block_parses_and_hooks_settings_are_print_configs(where, code):
    data = json.loads(code)
    if isinstance(data, dict) and "hooks" in data:
        commands = json.dumps(data)
        agent = next(a for a in ("claude-code", "codex", "gemini-cli") if a in commands)
        server = "http://127.0.0.1:8000" if '"type": "http"' in commands else None
        # what print-config prints names the command by its absolute path, wherever it is installed
        program = re.search(r'"command": "(\S+) hook ', commands)
        command = program.group(1) if program else "agent-breaker"
        assert data == settings(agent, server=server, command=command), where


def test_there_are_data_blocks_to_check():
    assert len(YAML) >= 8 and len(JSON) >= 3
