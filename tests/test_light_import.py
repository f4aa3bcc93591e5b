"""The engine, replay and `guarded` need neither redis nor NeMo to be importable (issue 13's
light install, first step): a process where importing them fails still decides, escalates to
its SQLite file and guards a tool."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

SCRIPT = """
import sys
sys.modules["redis"] = None            # importing it now raises ImportError
sys.modules["nemoguardrails"] = None
import agent_breaker
from agent_breaker import Engine, ReceiptKeys, guarded
from agent_breaker.escalations import SqliteEscalations
queue = SqliteEscalations(sys.argv[1])
engine = Engine(receipt_keys=ReceiptKeys.ephemeral(), listeners=[], escalations=queue)
def run_sql(q):
    raise ValueError("syntax error")
tool = guarded(run_sql, engine=engine, session="s1")
for _ in range(4):  # the fourth runs under a warning
    try:
        tool("SELEC 1")
    except ValueError:
        pass
out = tool("SELEC 1")  # the fifth is refused
print(out["error"], [e.heuristic for e in queue.list()], "redis" in sys.modules and sys.modules["redis"] is not None)
from agent_breaker.store import store_from_uri
try:
    store_from_uri("redis://127.0.0.1:6379/0")
except ImportError as exc:
    print(exc)
"""


def test_the_core_runs_without_redis_or_nemo(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "e.db")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[-2] == "IDENTICAL_FAILURE ['identical_failure'] False"
    # a feature whose extra is missing names it
    assert lines[-1] == "storage.url redis:// needs 'redis', which is not installed: pip install \"agent-breaker-rails[redis]\""


SERVE_WITHOUT_REDIS = """
import sys
sys.modules["redis"] = None
from agent_breaker.configs import ROOT, config_path
from agent_breaker.server import ServeError, ServedConfigs
print(ServedConfigs(ROOT).ids)
try:
    ServedConfigs(config_path("agent_breaker_redis"))
except ServeError as exc:
    print(exc)
# a root of one's own (the shipped configs, copied) is served whole or not at all
import shutil, sys, tempfile
own = tempfile.mkdtemp()
for name in ("agent_breaker", "agent_breaker_redis"):
    shutil.copytree(config_path(name), f"{own}/{name}")
try:
    ServedConfigs(__import__("pathlib").Path(own))
except ServeError as exc:
    print(exc)
"""


def test_the_shipped_configs_are_served_without_redis_but_the_redis_one():
    pytest.importorskip("nemoguardrails")
    env = {**os.environ, "AGENT_BREAKER_RECEIPT_KEYS": "k1:" + "ab" * 32, "NEMO_GUARDRAILS_NO_USAGE_STATS": "1"}
    env.pop("REDIS_URL", None)
    proc = subprocess.run([sys.executable, "-c", SERVE_WITHOUT_REDIS], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    served, refused, own = proc.stdout.splitlines()[-3:]
    assert served == "['agent_breaker', 'agent_breaker_observe', 'agent_breaker_v1', 'coding_agent']"
    assert "config agent_breaker_redis is not served" in proc.stderr and '"agent-breaker-rails[redis]"' in proc.stderr
    # asked for by itself, it is an error that names the extra
    assert refused.startswith("config agent_breaker_redis:") and '"agent-breaker-rails[redis]"' in refused
    assert own.startswith("config agent_breaker_redis:") and '"agent-breaker-rails[redis]"' in own


PUBLIC_NAMES = """
import importlib, pkgutil, types, agent_breaker
# every module of the package imported first, as an application's other imports may
for info in pkgutil.walk_packages(agent_breaker.__path__, "agent_breaker."):
    if ".integrations." not in info.name and ".server" not in info.name and not info.name.endswith("__main__"):
        importlib.import_module(info.name)
bad = [n for n in agent_breaker.__all__ if isinstance(getattr(agent_breaker, n), types.ModuleType)]
print(sorted(agent_breaker.__all__) == sorted(agent_breaker._MODULES), bad)
"""


def test_each_public_name_is_what_it_names_whatever_was_imported_before():
    # a public name spelled like a module of the package would be that module once imported
    proc = subprocess.run([sys.executable, "-c", PUBLIC_NAMES], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["True", "[]"]
