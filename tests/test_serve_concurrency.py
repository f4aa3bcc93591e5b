"""One slow dependency must not stall the rest of the server: a decision awaiting Redis holds
neither NeMo's runtime nor the event loop, so another config's decisions (and another
session's, wherever an action awaits) go on meanwhile. Ordering, not timing: the Redis replies
are held back until the other decision has answered."""

from __future__ import annotations

import shutil
import threading
import uuid
from pathlib import Path

import httpx
import pytest
from _proxy import TcpProxy
from _server import TOKEN, call, db_url, start
from conftest import redis_or_skip

pytest.importorskip("nemoguardrails")

from agent_breaker.configs import config_path


def served_root(tmp: Path) -> Path:
    """The in-memory config and the Redis one, whose decisions wait up to 30 s on Redis (the
    shipped 250 ms would answer from local state before the held replies come)."""
    root = tmp / "configs"
    for name in ("agent_breaker", "agent_breaker_redis"):
        shutil.copytree(config_path(name), root / name)
    redis_yml = root / "agent_breaker_redis" / "config.yml"
    redis_yml.write_text(redis_yml.read_text().replace("timeout_ms: 250", "timeout_ms: 30000"))
    return root


def test_a_decision_held_up_by_redis_does_not_stall_another_configs_decision(tmp_path):
    redis_or_skip()
    upstream = httpx.URL(db_url(8).replace("redis://", "http://"))
    proxy = TcpProxy((upstream.host, upstream.port or 6379))
    server = start(
        {"REDIS_URL": f"redis://127.0.0.1:{proxy.port}/8", "AGENT_BREAKER_API_TOKEN": TOKEN},
        args=("--config", str(served_root(tmp_path))),
        token=TOKEN,
    )
    try:
        session = f"s-{uuid.uuid4().hex[:8]}"
        proxy.hold()
        held: dict[str, httpx.Response] = {}
        slow = threading.Thread(target=lambda: held.update(r=server.events(session, call(1), config_id="agent_breaker_redis")))
        slow.start()
        assert proxy.asked_while_held.wait(timeout=60)
        # the Redis decision is under way and waits for its replies; the in-memory one answers
        [verdict] = server.verdicts(session, call(1), config_id="agent_breaker")
        assert verdict["allowed"] is True
        assert slow.is_alive() and not held  # still waiting on Redis
        proxy.release()
        slow.join(timeout=60)
        assert held["r"].status_code == 200 and held["r"].json()["events"][0]["allowed"] is True
    finally:
        proxy.release()
        server.stop()
        proxy.close()
