"""The embedded SQLite store's own details (the engine-level contract suite runs on it too):
atomic across processes, owner-only file, unreadable rows refused, URIs."""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from agent_breaker._state import SessionState
from agent_breaker.config import BreakerConfig
from agent_breaker.store import CorruptState, store_from_uri
from agent_breaker.store.sqlite import SQLiteStore, path_of

PROCESSES = 4
UPDATES = 150


def _count(state):
    state = state or SessionState("s")
    state.spend.steps += 1
    return state, state.spend.steps


def _hammer(uri: str, n: int) -> None:
    store = SQLiteStore(uri)
    cfg = BreakerConfig(consecutive_failures=None, failure_rate_pct=None, failure_threshold=10**6)
    for _ in range(n):
        store.update_session("s", 1.0, _count)
        store.add_spend("team", 1, 0.5, 3600.0, 1.0)
        store.breaker_record("tool", cfg, 1.0, failed=True, slow=False, probe=None)
    store.close()


def test_processes_writing_one_file_lose_no_update(tmp_path):
    uri = f"sqlite:///{tmp_path}/state.db"
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_hammer, args=(uri, UPDATES)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    store = SQLiteStore(uri)
    assert store.peek_session("s").spend.steps == PROCESSES * UPDATES
    assert store.add_spend("team", 0, 0.0, 3600.0, 1.0) == (PROCESSES * UPDATES, PROCESSES * UPDATES * 0.5)
    assert store.breaker_state("tool").consecutive_failures == PROCESSES * UPDATES


def test_the_file_is_its_owners_only(tmp_path):
    SQLiteStore(f"sqlite:///{tmp_path}/sub/state.db")
    assert stat.S_IMODE(os.stat(tmp_path / "sub" / "state.db").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "sub").st_mode) == 0o700


def test_an_unreadable_row_is_refused_not_replaced(tmp_path):
    store = SQLiteStore(f"sqlite:///{tmp_path}/state.db")
    store.update_session("s", 1.0, _count)
    with sqlite3.connect(tmp_path / "state.db") as db:
        db.execute("UPDATE sessions SET state = ? WHERE key = 's'", (b"not json",))
    with pytest.raises(CorruptState):
        store.update_session("s", 2.0, _count)
    with sqlite3.connect(tmp_path / "state.db") as db:
        assert db.execute("SELECT state FROM sessions WHERE key = 's'").fetchone()[0] == b"not json"


def test_a_session_idle_past_its_ttl_starts_over(tmp_path):
    store = SQLiteStore(f"sqlite:///{tmp_path}/state.db", ttl_s=10.0)
    assert store.update_session("s", 1.0, _count) == 1
    assert store.update_session("s", 5.0, _count) == 2
    assert store.update_session("s", 16.0, _count) == 1


@pytest.mark.parametrize("uri", ["sqlite://", "sqlite:///", "sqlite://host/x.db", "memory:///x.db"])
def test_a_uri_that_names_no_file_is_refused(uri):
    with pytest.raises(ValueError, match="sqlite:///path"):
        path_of(uri)


def test_the_uri_picks_the_store_and_the_home_folder_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert path_of("sqlite:///~/ab/state.db") == tmp_path / "ab" / "state.db"
    assert path_of("sqlite:////var/ab.db") == Path("/var/ab.db")
    assert path_of("sqlite:///ab.db") == Path("ab.db")  # relative, as SQLAlchemy reads it
    assert isinstance(store_from_uri(f"sqlite:///{tmp_path}/x.db", ttl_s=5.0), SQLiteStore)
