"""The report's rooms: read -> model -> text -> html, each importing only the rooms before it."""

from __future__ import annotations

import ast
from pathlib import Path

import agent_breaker.report as report

#: in the order they may import each other
ROOMS = ("_read", "_model", "_text", "_html")
FOLDER = Path(report.__file__).parent


def rooms_imported(room: str) -> set[str]:
    """The rooms a room imports (`from ._read import ...`), at any depth of its source."""
    tree = ast.parse((FOLDER / f"{room}.py").read_text(), room)
    return {
        node.module.partition(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is not None
    }


def test_every_module_of_the_report_is_a_room():
    assert sorted(p.stem for p in FOLDER.glob("*.py")) == sorted(["__init__", *ROOMS])


def test_a_room_imports_only_the_rooms_before_it():
    for i, room in enumerate(ROOMS):
        assert rooms_imported(room) <= set(ROOMS[:i]), room


def test_the_package_exports_what_its_callers_import():
    # agent_breaker/cli.py, tests/test_report.py, tests/test_escalations.py, tests/test_incident_sinks.py
    names = {"ReportError", "build", "format_html", "format_text", "observe", "read_legit", "RULES", "Rule", "percentile"}
    assert set(report.__all__) == names
    assert all(getattr(report, name).__module__.startswith("agent_breaker.report._") for name in names - {"RULES"})
