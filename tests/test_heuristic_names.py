"""One machine name per heuristic, written once in agent_breaker/heuristics.py, and every other
place that writes the names held to it: the sets there, the config sections and `modes:`, the
policy's check tables, the Colang flows, docs/heuristics.md and the README's index of it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from agent_breaker import _policy as policy
from agent_breaker import heuristics as H
from agent_breaker.config import AgentBreakerConfig, ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[1]

#: every heuristic: the module's string constants
NAMES: dict[str, str] = {k: v for k, v in vars(H).items() if k.isupper() and isinstance(v, str)}
HEURISTICS: frozenset[str] = frozenset(NAMES.values())
#: the module's collections of heuristics (CONFIGURABLE, LOOPS, GRADUATED, ...)
SETS: dict[str, frozenset[str]] = {
    k: frozenset(v) for k, v in vars(H).items() if k.isupper() and isinstance(v, (tuple, frozenset, set))
}

#: config sections that are not named after one heuristic, and the heuristics each one sets
#: (a new section is either a heuristic's name or listed here)
SHARED_SECTIONS: dict[str, frozenset[str]] = {
    "breaker": frozenset({H.CIRCUIT_OPEN, H.CIRCUIT_HALF_OPEN}),
    "budget": frozenset({H.TOKEN_BUDGET, H.COST_BUDGET, H.BUDGET_SOFT_LIMIT}),
    "receipts": frozenset({H.UNVERIFIED_CLAIM, H.EMPTY_MUTATION_RESULT}),
    # per tool: its token allocation, its schemas
    "tools": frozenset({H.TOOL_TOKEN_BUDGET, H.SCHEMA_VIOLATION, H.SCHEMA_DRIFT}),
    # what every loop heuristic reads: a user turn with news, a result that is progress
    "user_turns": frozenset(H.LOOPS),
    "progress": frozenset(H.LOOPS),
    "storage": frozenset({H.STORAGE_UNAVAILABLE, H.CORRUPT_STATE}),
    "escalations": frozenset({H.ESCALATED}),
    "sessions": frozenset(),
    "incidents": frozenset(),
}
#: configurable heuristics with no settings of their own (the service's Retry-After sets early_retry)
NO_SETTINGS = frozenset({H.EARLY_RETRY})


def _sections() -> set[str]:
    """The config's sections: its fields holding a model, or a table of models (tools)."""
    out = set()
    for name, field in AgentBreakerConfig.model_fields.items():
        annotation = field.annotation
        args = getattr(annotation, "__args__", ())
        if (isinstance(annotation, type) and issubclass(annotation, BaseModel)) or (
            getattr(annotation, "__origin__", None) is dict and isinstance(args[-1], type) and issubclass(args[-1], BaseModel)
        ):
            out.add(name)
    return out


def test_each_name_is_its_constant_in_lower_case_and_written_once():
    assert len(HEURISTICS) == len(NAMES)
    for constant, name in NAMES.items():
        assert name == constant.lower(), (constant, name)
        assert re.fullmatch(r"[a-z]+(_[a-z]+)*", name), name


def test_every_set_of_heuristics_names_defined_heuristics_only():
    assert {"CONFIGURABLE", "LOOPS", "GRADUATED", "BUDGETS", "SESSION_TERMINAL", "ESCALATING"} <= set(SETS)
    for set_name, members in SETS.items():
        assert members <= HEURISTICS, (set_name, sorted(members - HEURISTICS))
    assert len(set(H.CONFIGURABLE)) == len(H.CONFIGURABLE)


def test_every_config_section_is_a_heuristic_or_a_known_shared_section():
    sections = _sections()
    for section in sections:
        assert section in HEURISTICS or section in SHARED_SECTIONS, f"config section {section!r} names no heuristic"
    assert set(SHARED_SECTIONS) <= sections, sorted(set(SHARED_SECTIONS) - sections)
    for section, heuristics in SHARED_SECTIONS.items():
        assert section not in HEURISTICS and heuristics <= HEURISTICS, section
    # and every heuristic a config can switch has its settings somewhere
    configured = (sections & HEURISTICS).union(*SHARED_SECTIONS.values(), NO_SETTINGS)
    assert set(H.CONFIGURABLE) <= configured, sorted(set(H.CONFIGURABLE) - configured)


def test_modes_take_every_configurable_heuristic_and_nothing_else():
    cfg = parse_config({"modes": dict.fromkeys(H.CONFIGURABLE, "observe")})
    assert all(cfg.mode_of(h) == "observe" for h in H.CONFIGURABLE)
    for other in sorted(HEURISTICS - set(H.CONFIGURABLE)):
        with pytest.raises(ConfigError, match=other):
            parse_config({"modes": {other: "off"}})


def _written_modes() -> list[tuple[str, str]]:
    """(where, heuristic) for every `modes:` key the shipped configs and the docs write."""
    out = []
    for path in sorted((ROOT / "config").glob("*/config.yml")):
        block = (yaml.safe_load(path.read_text()).get("custom_data") or {}).get("agent_breaker") or {}
        for settings in [block, *(o.get("settings", {}) for o in block.get("overrides", ()))]:
            out += [(str(path.relative_to(ROOT)), key) for key in settings.get("modes") or {}]
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for inline in re.findall(r"modes: \{([^}]*)\}", path.read_text()):
            out += [(path.name, key) for key in re.findall(r"(\w+): ", inline)]
    return out


def test_every_modes_key_the_configs_and_docs_write_is_configurable():
    written = _written_modes()
    assert written  # the docs do show some
    wrong = [(where, key) for where, key in written if key not in H.CONFIGURABLE and key != "heuristic"]
    assert not wrong, wrong


def test_the_policy_tables_check_configurable_heuristics_each_once():
    for table in (policy.SESSION_LIMITS, policy.CALL_CHECKS):
        names = [name for name, _check in table]
        assert len(set(names)) == len(names), names
        assert set(names) <= set(H.CONFIGURABLE), sorted(set(names) - set(H.CONFIGURABLE))


def test_the_flows_answer_with_defined_heuristics():
    for path in sorted(ROOT.glob("rails/*.co")) + sorted(ROOT.glob("config/*/*.co")):
        for name in re.findall(r'heuristic="(\w+)"', path.read_text()):
            assert name in HEURISTICS, (path.name, name)


def _doc_entries(text: str) -> set[str]:
    """Names in a heading, or in the first cell of a table row."""
    out: set[str] = set()
    for line in text.splitlines():
        if line.startswith("#"):
            out |= set(re.findall(r"`(\w+)`", line))
        elif line.startswith("| `"):
            out |= set(re.findall(r"`(\w+)`", line.split("|")[1]))
    return out


def test_every_heuristic_has_a_heading_or_an_entry_in_the_heuristics_doc():
    entries = _doc_entries((ROOT / "docs" / "heuristics.md").read_text())
    assert entries >= HEURISTICS, f"not in docs/heuristics.md: {sorted(HEURISTICS - entries)}"
    assert entries <= HEURISTICS, f"docs/heuristics.md names no such heuristic: {sorted(entries - HEURISTICS)}"


def test_the_readme_index_of_the_heuristics_doc_names_defined_heuristics():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## The heuristics\n", 1)[1].split("\n## ", 1)[0]
    index = "\n".join(line for line in section.splitlines() if line.startswith("| `"))  # the table's rows
    named = set(re.findall(r"`(\w+)`", index))
    assert named and named <= HEURISTICS, sorted(named - HEURISTICS)
