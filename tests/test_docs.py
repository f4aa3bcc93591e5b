"""The docs site builds with no warning (MkDocs, strict), and its reference pages are generated
from the code: every config key, every protocol event, and the route table, which is held to the
routes of a built app."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agent_breaker._reference import _sections, config_reference, protocol_reference
from agent_breaker.config import AgentBreakerConfig
from agent_breaker.protocol import KINDS

ROOT = Path(__file__).resolve().parents[1]


def test_every_config_key_is_in_the_reference():
    page = config_reference()
    sections = _sections(AgentBreakerConfig, "")
    assert len(sections) > 20
    for path, model in sections:
        assert (f"## `{path}`" if path else "## Top level") in page
        for name in model.model_fields:
            assert f"| `{name}` |" in page, (path, name)


def test_every_protocol_event_and_field_is_in_the_reference():
    page = protocol_reference()
    for kind in KINDS:
        assert f"`{kind.colang}`" in page and f"`{kind.verdict}`" in page
        for colang_field in kind.fields:
            assert f"`{colang_field}`" in page, (kind.name, colang_field)


def test_a_section_under_a_map_or_a_union_is_found():
    paths = [path for path, _ in _sections(AgentBreakerConfig, "")]
    assert "tools.<name>" in paths and "tools.<name>.fallback" in paths  # under a map, then a union with None


@pytest.mark.slow
def test_the_docs_site_builds_with_no_warning(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "WARNING" not in proc.stderr, proc.stderr[-3000:]
    for page in ("index.html", "reference/config/index.html", "reference/http/index.html", "reference/python/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    assert "check_tool_call" in (tmp_path / "site" / "reference" / "python" / "index.html").read_text()


ROUTES_OF_THE_APP = """
import json, sys
from pathlib import Path
from agent_breaker.configs import ROOT
from agent_breaker.server import build_app
from agent_breaker.server._paths import GATEWAY_PATHS, HOOK_PATHS
env = {"AGENT_BREAKER_API_TOKEN": "a" * 40, "AGENT_BREAKER_ADMIN_TOKEN": "b" * 40}
guard = build_app(ROOT, host="127.0.0.1", environ=env)
routes = [
    [m, r.path.replace("{tool:path}", "{tool}")] for r in guard.app.routes for m in sorted(getattr(r, "methods", None) or ["GET"])
]
routes += [["POST", p] for p in (*GATEWAY_PATHS, *HOOK_PATHS)]
print(json.dumps(sorted(routes)))
"""


@pytest.mark.slow
def test_the_route_table_is_what_a_built_app_serves(tmp_path):
    import json

    from agent_breaker.server._paths import routes

    proc = subprocess.run(
        [sys.executable, "-c", ROUTES_OF_THE_APP],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "XDG_STATE_HOME": str(tmp_path),
            "AGENT_BREAKER_ESCALATIONS_DB": str(tmp_path / "e.db"),
            "AGENT_BREAKER_RECEIPT_KEYS": "k1:" + "ab" * 32,
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    served = {(m, p) for m, p in json.loads(proc.stdout.splitlines()[-1]) if m != "HEAD"}
    assert served == {(m, p) for m, p, _ in routes()}


def test_the_architecture_page_names_every_module_over_500_lines():
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "architecture.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^- `([\w/]+\.py)`", page.split("## Modules over 500 lines", 1)[1], re.MULTILINE))
    package = root / "agent_breaker"
    long = {
        path.relative_to(package).as_posix()
        for path in package.rglob("*.py")
        if len(path.read_text(encoding="utf-8").splitlines()) > 500
    }
    assert listed == long
