"""The docs' PromQL queries (the operating guide's), run by a real Prometheus on what a real server exports:
every query is valid and evaluates, every metric it names is one the server exports, and the
queries meant to show something (the refusals of a cut loop, a breaker held open, the decision
latency) show it. Prometheus (Debian's `prometheus`, installed by .ci/run) and the server run on
free loopback ports, each stopped by its PID."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

httpx = pytest.importorskip("httpx")
pytest.importorskip("nemoguardrails")

from _doc_runner import PAGES, ROOT, blocks  # noqa: E402
from _ports import free_port  # noqa: E402
from _server import Server, call, result, start  # noqa: E402

ADMIN = "admin-token-" + "e" * 24
SCRAPE_S = 1


def queries(code: str) -> list[tuple[str, str]]:
    """(comment, query) of a PromQL block: each `#` line names the query on the lines after it."""
    found: list[tuple[str, str]] = []
    for line in code.splitlines():
        if line.startswith("#"):
            found.append((line.lstrip("# "), ""))
        elif line.strip():
            comment, query = found[-1]
            found[-1] = (comment, f"{query} {line.strip()}".strip())
    return found


def test_a_promql_block_is_read_query_by_query():
    code = "# first\nsum(a)\n  / b\n# second\nc > 0\n"
    assert queries(code) == [("first", "sum(a) / b"), ("second", "c > 0")]


#: the shipped config, with a step ceiling a test reaches and one open escalation per tenant:
#: a second session past the ceiling is collapsed onto the first's escalation
STEPS = 8


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    # an on-call webhook that is down (nothing listens on its port): incidents that never arrive
    webhook = f"http://127.0.0.1:{free_port()}/incidents"
    escalations = tmp_path_factory.mktemp("escalations")
    env = {
        "AGENT_BREAKER_ADMIN_TOKEN": ADMIN,
        "AGENT_BREAKER_INCIDENT_WEBHOOK": webhook,
        "AGENT_BREAKER_ESCALATIONS_DB": str(escalations / "escalations.db"),
    }
    config = tmp_path_factory.mktemp("config") / "agent_breaker"
    shutil.copytree(ROOT / "config" / "agent_breaker", config)
    tree = yaml.safe_load((config / "config.yml").read_text())
    tree["custom_data"]["agent_breaker"].update({"step_limit": {"max_steps": STEPS}, "escalations": {"max_open_per_tenant": 1}})
    (config / "config.yml").write_text(yaml.safe_dump(tree, sort_keys=False))
    srv = start(env, args=("--config", str(config)))
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def prometheus(server: Server, tmp_path_factory) -> Iterator[str]:
    if shutil.which("prometheus") is None:
        if os.environ.get("CI"):
            pytest.fail("no prometheus under CI (.ci/run installs Debian's prometheus)")
        pytest.skip("Debian's prometheus is not installed")
    folder = tmp_path_factory.mktemp("prometheus")
    token = server.headers["Authorization"].removeprefix("Bearer ")
    (folder / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {SCRAPE_S}s, evaluation_interval: {SCRAPE_S}s}}\n"
        "scrape_configs:\n"
        "  - job_name: agent-breaker\n"
        f"    authorization: {{credentials: {token}}}\n"
        f"    static_configs: [{{targets: ['{server.base.removeprefix('http://')}']}}]\n"
    )
    address = f"127.0.0.1:{free_port()}"
    argv = ["prometheus", f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}"]
    argv.append(f"--web.listen-address={address}")
    with (folder / "log").open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://{address}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (folder / "log").read_text()[-2000:]
            time.sleep(0.2)
        yield f"http://{address}"
    finally:
        proc.terminate()
        proc.wait(30)


def ask(prometheus: str, query: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{prometheus}/api/v1/query", params={"query": query}, timeout=30)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", (query, body)
    return body["data"]["result"]


def until_scraped(prometheus: str, query: str) -> None:
    """Wait until Prometheus has scraped what `query` selects in at least three scrapes."""
    deadline = time.monotonic() + 60
    while not ask(prometheus, f"count_over_time(({query})[1m:{SCRAPE_S}s]) >= 3"):
        assert time.monotonic() < deadline, f"never scraped: {query}"
        time.sleep(0.5)


def test_every_query_of_the_operating_guide_runs_on_what_the_server_exports(server: Server, prometheus: str):
    # what the queries watch: a loop cut at the gateway, a breaker an operator holds open
    for n in range(1, 6):
        r = server.post("/v1/agent-breaker/check", {"session_id": "P", "event": call(n)})
        if r.status_code == 429:
            break
        server.verdicts("P", result(n, error="relation orders does not exist"))
    assert r.status_code == 429, r.text
    forced = httpx.post(
        f"{server.base}/v1/agent-breaker/breakers/send_email?config_id=agent_breaker",
        json={"state": "forced_open"},
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=30,
    )
    assert forced.status_code == 200, forced.text
    # two sessions past the step ceiling: the second's escalation is collapsed onto the first's
    for session in ("S1", "S2"):
        for n in range(1, STEPS + 2):
            r = server.post("/v1/agent-breaker/check", {"session_id": session, "event": call(n, args={"q": f"{session}-{n}"})})
            if r.status_code == 429:
                break
            server.verdicts(session, result(n, ok=True, payload={"rows": [f"{session}-{n}"]}))
        assert r.status_code == 429 and r.headers["X-Agent-Breaker-Heuristic"] == "step_limit", r.text
    until_scraped(prometheus, "agent_breaker_escalations_collapsed_total")
    until_scraped(prometheus, 'agent_breaker_decisions_total{verdict="blocked"}')
    # a rate needs a counter that moved between scrapes: the cut session calls again, refused again
    assert server.post("/v1/agent-breaker/check", {"session_id": "P", "event": call(9)}).status_code == 429
    until_scraped(prometheus, 'rate(agent_breaker_decisions_total{verdict="blocked"}[5m]) > 0')
    until_scraped(prometheus, 'agent_breaker_breaker_state{state="forced_open"} == 1')
    until_scraped(prometheus, 'agent_breaker_incidents_total{outcome="failed"}')  # after the webhook's retries

    promql = [b.code for page in PAGES for b in blocks((ROOT / page).read_text()) if b.lang == "promql"]
    assert promql, "no PromQL block in the docs"
    exported = set(_names(prometheus))
    answers = {}
    for comment, query in queries("".join(promql)):
        for name in re.findall(r"\bagent_breaker_\w+", query):
            assert name in exported, f"{comment}: {name} is not exported ({sorted(exported)})"
        answers[comment] = ask(prometheus, query)

    def answer(word: str) -> list[dict[str, Any]]:
        return next(v for k, v in answers.items() if word in k)

    by_heuristic = {a["metric"].get("heuristic"): float(a["value"][1]) for a in answer("refused")}
    assert by_heuristic.get("identical_failure", 0) > 0, by_heuristic
    assert [a["metric"]["tool"] for a in answer("open")] == ["send_email"]
    (p99,) = answer("latency")
    assert 0 < float(p99["value"][1]) < 10
    assert [a["metric"]["sink"] for a in answer("on-call")] == ["webhook"]


def _names(prometheus: str) -> list[str]:
    r = httpx.get(f"{prometheus}/api/v1/label/__name__/values", timeout=30)
    return [n for n in r.json()["data"] if n.startswith("agent_breaker_")]
