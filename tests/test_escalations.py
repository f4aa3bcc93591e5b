"""The escalation queue (issue 12, item 3): records, the SQLite store (idempotent escalate, the
freeze and its resolution, restarts, two operators at once, hostile ids and notes), the relay's
delivery rules, `agent-breaker escalations` / `relay`, and the escalation routes of the real
server. Real SQLite files, a real HTTP receiver, a real server: no mocks."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_breaker._sinks import slack_text
from agent_breaker.config import ConfigError, parse_config
from agent_breaker.escalations import (
    Escalation,
    InvalidEscalation,
    Relay,
    RelayBusy,
    Spend,
    SqliteEscalations,
    ToolOutcome,
    db_path,
    default_db_path,
    escalation_key,
)
from agent_breaker.escalations.outbox import capped_key, capped_message, with_escalation
from agent_breaker.escalations.relay import incidents_only, sink_targets

ROOT = Path(__file__).resolve().parents[1]
NOW = 1_767_225_600.0


def escalation(session: str = "s1", heuristic: str = "unverified_claim", tenant: str | None = "acme", **kw: Any) -> Escalation:
    return Escalation.new(
        session=session,
        heuristic=heuristic,
        reason=kw.pop("reason", "the answer claims wire_transfer ran; no receipt for it"),
        now=kw.pop("now", NOW),
        tenant=tenant,
        feature=kw.pop("feature", "payments"),
        agent=kw.pop("agent", "teller"),
        counters=kw.pop("counters", {"claims": 1, "receipts": 0, "args_hash": "9f2c" * 16}),
        spend=kw.pop("spend", Spend(tokens=12_000, usd=0.42)),
        tools=kw.pop("tools", [ToolOutcome("wire_transfer", "blocked", 2), ToolOutcome("get_balance", "ok", 3)]),
        **kw,
    )


@pytest.fixture
def store(tmp_path) -> Iterator[SqliteEscalations]:
    s = SqliteEscalations(tmp_path / "escalations.db")
    yield s
    s.close()


def rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    """The file as SQLite itself reads it (not through the store)."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# ----------------------------------------------------------------------------- records


def test_a_record_round_trips_through_its_dict_and_holds_no_excerpts_unless_given():
    e = escalation()
    d = e.to_dict()
    assert Escalation.from_dict(d) == e
    assert d["session_id"] == "s1" and d["status"] == "open" and "excerpts" not in d
    assert d["tools"] == [
        {"tool": "wire_transfer", "outcome": "blocked", "count": 2},
        {"tool": "get_balance", "outcome": "ok", "count": 3},
    ]
    assert d["spend"] == {"tokens": 12_000, "usd": 0.42}
    assert d["collapsed"] == 0 and Escalation.from_dict({**d, "collapsed": 3}).collapsed == 3
    for bad in (-1, True, "3"):
        with pytest.raises(InvalidEscalation, match="collapsed"):
            Escalation.from_dict({**d, "collapsed": bad})
    assert e.id.startswith("esc_") and len(e.id) == 20
    assert e.key == escalation_key("acme", "s1", "unverified_claim") != escalation_key(None, "s1", "unverified_claim")
    # an unambiguous encoding: moving a separator between the parts makes another key
    assert escalation_key("a|b", "c", "h") != escalation_key("a", "b|c", "h")
    opted = escalation(excerpts=["transferred 500 EUR"])
    assert opted.to_dict()["excerpts"] == ["transferred 500 EUR"]


def test_a_record_is_immutable_all_the_way_down():
    e = escalation()
    with pytest.raises(AttributeError):
        e.status = "resumed"  # type: ignore[misc]
    with pytest.raises(TypeError):
        e.counters["claims"] = 2  # type: ignore[index]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"counters": {"args": "DROP TABLE orders; -- a sentence of payload"}}, "counters.args"),
        ({"counters": {"Not A Name": 1}}, "counters"),
        ({"counters": {"n": float("nan")}}, "counters.n"),
        ({"session": "line\nbreak"}, "session"),
        ({"session": "x" * 257}, "session"),
        ({"heuristic": "Not-a-name"}, "heuristic"),
        ({"reason": "r" * 1001}, "reason"),
        ({"tools": [ToolOutcome("t", "ok")] * 65}, "tools"),
        ({"excerpts": ["x" * 2001]}, "excerpts"),
    ],
)
def test_a_record_refuses_what_is_not_names_numbers_and_hashes_naming_the_field(change, field):
    with pytest.raises(InvalidEscalation, match=field.replace(".", r"\.")) as caught:
        escalation(**change)
    assert "DROP TABLE" not in str(caught.value)  # the message names the field, never the value


def test_tool_outcomes_and_spend_are_checked():
    with pytest.raises(InvalidEscalation, match="outcome"):
        ToolOutcome("t", "Failed with 503")
    with pytest.raises(InvalidEscalation, match="spend.tokens"):
        Spend(tokens=-1)
    with pytest.raises(InvalidEscalation, match="spend.usd"):
        Spend(usd=float("inf"))
    with pytest.raises(InvalidEscalation, match="not an escalation record"):
        Escalation.from_dict({"id": "esc_0123456789abcdef"})


# ----------------------------------------------------------------------------- the store


def test_an_aborted_session_stays_closed(store):
    e = store.escalate(escalation())
    aborted = store.resolve(e.id, "abort", "the agent invents transfers: stop it")
    assert aborted.status == "aborted"
    assert store.frozen("acme", "s1") == aborted  # the engine keeps refusing it, now with the human's decision
    # a later trip that escalated anyway (another worker) is what the session waits on first
    reopened = store.escalate(escalation(heuristic="step_limit", now=NOW + 5))
    assert store.frozen("acme", "s1") == reopened


def test_a_new_store_on_the_same_file_sees_everything_and_each_sees_the_others_moves(tmp_path):
    path = tmp_path / "escalations.db"
    first = SqliteEscalations(path)
    e = first.escalate(escalation())
    first.add_incident({"kind": "trip", "session": "s1", "heuristic": "identical_call", "ts": NOW})
    first.close()
    engine_side = SqliteEscalations(path)  # the engine's store, after a restart
    operator_side = SqliteEscalations(path)  # the CLI's or the server's
    try:
        assert engine_side.frozen("acme", "s1") == e
        assert engine_side.pending_count() == 2
        operator_side.resolve(e.id, "resume")
        assert engine_side.frozen("acme", "s1") is None  # read from the file: the resolution counts at once
    finally:
        engine_side.close()
        operator_side.close()
    with pytest.raises(Exception, match="closed"):
        engine_side.frozen("acme", "s1")


# an operator in a process of its own: opens the file, waits for the go file, resolves
OPERATOR = """
import os, sys, time
from agent_breaker.escalations import AlreadyResolved, SqliteEscalations
store = SqliteEscalations(sys.argv[1])
while not os.path.exists(sys.argv[3]):
    time.sleep(0.001)
try:
    store.resolve(sys.argv[2], "abort")
    print("won")
except AlreadyResolved:
    print("lost")
"""


@pytest.mark.slow  # a subprocess or a server
def test_operators_in_other_processes_resolve_once_too(store, tmp_path):
    e = store.escalate(escalation())
    go = tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", OPERATOR, str(store.path), e.id, str(go)], stdout=subprocess.PIPE, text=True)
        for _ in range(4)
    ]
    time.sleep(0.5)  # let them open the file: they then race for the write lock
    go.touch()
    results = sorted(p.communicate(timeout=60)[0].strip() for p in procs)
    assert results == ["lost", "lost", "lost", "won"]
    assert rows(store.path, "SELECT count(*) FROM outbox WHERE kind = 'resolution'") == [(1,)]


def test_the_file_and_its_new_folders_are_private_and_in_wal_mode(tmp_path):
    path = tmp_path / "state" / "agent-breaker" / "escalations.db"
    s = SqliteEscalations(path)
    s.escalate(escalation())
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(path.parent.parent.stat().st_mode) == 0o700
        assert rows(path, "PRAGMA journal_mode") == [("wal",)]
        assert rows(path, "PRAGMA user_version") == [(3,)]
    finally:
        s.close()


def test_a_file_of_an_earlier_schema_gets_the_reserve_and_collapsing_and_keeps_its_escalations(tmp_path):
    import sqlite3

    path = tmp_path / "v1.db"
    s = SqliteEscalations(path)
    kept = s.escalate(escalation())
    s.close()
    conn = sqlite3.connect(path)  # as version 1 left it: no reserve, no retention index, nothing collapsed
    conn.executescript(
        "DROP TABLE reserve; DROP INDEX escalations_resolved; DROP INDEX escalations_tenant; "
        "DROP TABLE collapsed_sessions; DROP INDEX escalations_open_tenant; ALTER TABLE escalations DROP COLUMN collapsed; "
        "PRAGMA user_version = 1"
    )
    conn.close()
    s = SqliteEscalations(path, max_open_per_tenant=1)
    try:
        assert rows(path, "PRAGMA user_version") == [(3,)]
        assert rows(path, "SELECT count(*) > 0 FROM reserve") == [(1,)]
        assert s.get(kept.id) == kept and s.list(tenant="acme") == [kept]
        assert s.escalate(escalation(session="s2")).collapsed == 1  # the tenant is at its cap of one
        assert s.frozen("acme", "s2").id == kept.id
    finally:
        s.close()


def test_a_file_from_a_newer_schema_is_refused(tmp_path):
    import sqlite3

    path = tmp_path / "newer.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(Exception, match="newer agent-breaker"):
        SqliteEscalations(path)


def test_where_the_file_is_looked_for():
    data = {"escalations": {"db": "/srv/ab/esc.db"}}
    assert db_path(parse_config(data, environ={}).escalations) == Path("/srv/ab/esc.db")
    # the variable wins over the config's value, and the CLI's --db over both
    env = {"AGENT_BREAKER_ESCALATIONS_DB": "/tmp/env.db"}
    assert db_path(parse_config(data, environ=env).escalations) == Path("/tmp/env.db")
    assert db_path(parse_config(data, environ=env).escalations, explicit="/tmp/cli.db") == Path("/tmp/cli.db")
    assert default_db_path({"XDG_STATE_HOME": "/var/state"}) == Path("/var/state/agent-breaker/escalations.db")
    assert db_path(parse_config({}, environ={"XDG_STATE_HOME": "/var/state"}).escalations) == Path(
        "/var/state/agent-breaker/escalations.db"
    )
    # the XDG rule: a relative XDG_STATE_HOME is ignored
    assert default_db_path({"XDG_STATE_HOME": "rel"}) == Path.home() / ".local/state/agent-breaker/escalations.db"
    assert db_path(None) == default_db_path({})


def test_the_config_section_checks_its_values_and_where_things_live_is_process_level(tmp_path):
    with pytest.raises(ConfigError, match="queue"):
        parse_config({"escalations": {"queue": "no spaces allowed"}})
    with pytest.raises(ConfigError, match="process-level"):
        parse_config({"overrides": [{"tenant": "acme", "settings": {"escalations": {"db": "/tmp/x.db"}}}]})
    # excerpts are opted into per tenant
    config = parse_config({"overrides": [{"tenant": "acme", "settings": {"escalations": {"excerpts": True}}}]})
    assert config.resolve("acme", None, None).escalations.excerpts and not config.escalations.excerpts
    # the cap of open escalations is one for every tenant, a whole number from 1
    assert parse_config({}).escalations.max_open_per_tenant == 20
    with pytest.raises(ConfigError, match="max_open_per_tenant"):
        parse_config({"escalations": {"max_open_per_tenant": 0}})
    with pytest.raises(ConfigError, match="process-level"):
        parse_config({"overrides": [{"tenant": "acme", "settings": {"escalations": {"max_open_per_tenant": 500}}}]})
    with pytest.raises(ValueError, match="max_open_per_tenant must be a whole number above 0, but was 0"):
        SqliteEscalations(tmp_path / "e.db", max_open_per_tenant=0)


def test_a_queue_url_must_be_amqp_and_the_message_hides_credentials():
    for url in ("http://user:s3cret@host/", "user:s3cret@host"):
        with pytest.raises(ConfigError) as caught:
            parse_config({}, environ={"AGENT_BREAKER_QUEUE_URL": url})
        assert "s3cret" not in str(caught.value) and "$AGENT_BREAKER_QUEUE_URL must be an amqp://" in str(caught.value)
        with pytest.raises(ConfigError) as caught:
            parse_config({"escalations": {"queue_url": url}}, environ={})
        assert "s3cret" not in str(caught.value) and "escalations.queue_url: must be an amqp://" in str(caught.value)
    env = {"AGENT_BREAKER_QUEUE_URL": "amqps://user:s3cret@host/"}
    config = parse_config({"escalations": {"queue_url": "amqp://other/"}}, environ=env)
    assert config.escalations.queue_url == env["AGENT_BREAKER_QUEUE_URL"]


# ----------------------------------------------------------------------------- the relay


def test_one_relay_per_file(store):
    first = Relay(store, {"t": lambda m, k: None}).start()
    try:
        with pytest.raises(RelayBusy, match="another relay"):
            Relay(SqliteEscalations(store.path), {"t": lambda m, k: None}).run_once()
    finally:
        first.stop()
    second = Relay(store, {"t": lambda m, k: None})  # the first let go of the file
    second.run_once()
    second.close()


def test_the_relay_thread_delivers_what_is_written_while_it_runs(store):
    got: list[str] = []
    relay = Relay(store, {"t": lambda m, k: got.append(k)}, poll_s=0.05).start()
    try:
        e = store.escalate(escalation())
        relay.wake()
        deadline = time.monotonic() + 10
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        relay.stop()
    assert got == [f"escalation:{e.id}"]


TRIP = {
    "kind": "trip",
    "ts": NOW,
    "session": "s1",
    "tenant": None,
    "heuristic": "identical_call",
    "severity": "block",
    "tool": "run_sql",
    "reason": "run_sql was called 4 times with the same arguments and no new result",
    "counters": {"repeats": 4},
    "tokens_so_far": 900,
    "cost_usd_so_far": 0.01,
}


def test_the_incident_sinks_are_targets_the_webhook_for_all_the_file_for_incidents(store, tmp_path):
    from _receiver import Receiver

    receiver = Receiver()
    file = tmp_path / "incidents.jsonl"
    incidents = parse_config({"incidents": {"webhook": {"url": receiver.url + "/hook"}, "file": str(file)}}).incidents
    e = store.escalate(escalation(session="<!channel>"))
    store.add_incident(TRIP)
    store.resolve(e.id, "resume", "checked")
    relay = Relay(store, sink_targets(incidents))
    try:
        assert relay.run_once() == 3
    finally:
        relay.close()
    bodies = receiver.json_bodies("/hook")
    assert [b["kind"] for b in bodies] == ["escalation", "trip", "resolution"]
    assert all(b["idempotency_key"] for b in bodies)
    assert bodies[0]["text"].startswith(f":sos: agent-breaker escalation {e.id} (unverified_claim, session &lt;!channel&gt;")
    assert bodies[2]["text"].endswith("resumed: checked")
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    assert [d["kind"] for d in lines] == ["trip"]  # what `agent-breaker report` reads: incidents only
    from agent_breaker.report import observe

    with file.open("rb") as f:
        assert len(observe(f).trips) == 1


def test_a_file_target_accepts_other_kinds_unseen():
    got: list[dict[str, Any]] = []
    target = incidents_only(got.append)
    target({"kind": "escalation"}, "k1")
    target({"kind": "breaker", "tool": "t"}, "k2")
    assert got == [{"kind": "breaker", "tool": "t", "idempotency_key": "k2"}]


def test_a_tenants_cap_alert_reads_as_an_incident_in_chat_and_stays_out_of_the_incidents_file():
    alert = with_escalation(capped_message(escalation(session="junk-20", tenant="mallory"), 20, NOW), "esc_0123456789abcdef")
    assert slack_text(alert).startswith(
        ":warning: agent-breaker warn unverified_claim (session junk-20, tenant mallory): the tenant has 20 open escalations"
    )
    got: list[dict[str, Any]] = []
    incidents_only(got.append)(alert, capped_key("esc_0123456789abcdef"))
    assert got == []  # `agent-breaker report` reads trips and breaker moves


def test_the_chat_text_of_an_escalation_escapes_markup():
    d = {**escalation(tenant="<@U123>").to_dict(), "kind": "resolution", "status": "aborted", "note": "<https://evil|click>"}
    text = slack_text(d)
    assert "<" not in text and ">" not in text and "&lt;https://evil|click&gt;" in text


# ----------------------------------------------------------------------------- the CLI


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("AGENT_BREAKER_")}
    return subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**clean, **(env or {})},
    )


@pytest.mark.slow  # a subprocess or a server
def test_the_cli_lists_shows_and_resolves(tmp_path):
    path = tmp_path / "escalations.db"
    s = SqliteEscalations(path, max_open_per_tenant=2)
    a = s.escalate(escalation(session="s-a", now=NOW))
    b = s.escalate(escalation(session="s-b", heuristic="step_limit", now=NOW + 1))
    assert s.escalate(escalation(session="s-z", now=NOW + 2)).id == b.id  # acme at its cap: collapsed onto b
    env = {"AGENT_BREAKER_ESCALATIONS_DB": str(path)}
    listed = cli("escalations", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:3] == ["id", "status", "created"] and "collapsed" in lines[0].split()
    assert [line.split()[0] for line in lines[2:]] == [b.id, a.id] and "2026-01-01T00:00:01Z" in lines[2]
    assert [line.split()[6] for line in lines[2:]] == ["1", "0"]
    as_json = [json.loads(line) for line in cli("escalations", "list", "--json", env=env).stdout.splitlines()]
    assert [(d["id"], d["session_id"], d["heuristic"], d["status"]) for d in as_json] == [
        (b.id, "s-b", "step_limit", "open"),
        (a.id, "s-a", "unverified_claim", "open"),
    ]
    shown = cli("escalations", "show", a.id, "--db", str(path))  # --db instead of the variable
    assert shown.returncode == 0 and ["id", a.id] in [line.split() for line in shown.stdout.splitlines()]
    assert "wire_transfer" in shown.stdout
    done = cli("escalations", "resolve", a.id, "--decision", "abort", "--note", "invented a transfer", env=env)
    assert (done.returncode, done.stdout) == (0, f"{a.id}: aborted\n")
    assert s.frozen("acme", "s-a").status == "aborted"  # what the engine reads
    still_open = cli("escalations", "list", "--status", "open", "--json", env=env).stdout.splitlines()
    assert [json.loads(x)["id"] for x in still_open] == [b.id]
    other = s.escalate(escalation(session="s-c", tenant="globex", now=NOW + 2))
    theirs = cli("escalations", "list", "--tenant", "globex", "--json", env=env).stdout.splitlines()
    assert [json.loads(x)["id"] for x in theirs] == [other.id]
    resumed = json.loads(cli("escalations", "resolve", b.id, "--decision", "resume", "--json", env=env).stdout)
    assert resumed["status"] == "resumed" and s.frozen("acme", "s-b") is None
    s.close()


@pytest.mark.slow  # a subprocess or a server
def test_the_cli_says_what_went_wrong_and_exits_2(tmp_path):
    path = tmp_path / "escalations.db"
    s = SqliteEscalations(path)
    e = s.escalate(escalation())
    s.resolve(e.id, "resume")
    s.close()
    env = {"AGENT_BREAKER_ESCALATIONS_DB": str(path)}
    for args, message in [
        (("resolve", e.id, "--decision", "abort"), "already resumed"),
        (("resolve", "esc_' OR 1=1 --", "--decision", "abort"), "escalation id"),
        (("show", "../../etc/passwd"), "escalation id"),
        (("show", "esc_0000000000000000"), "no escalation esc_0000000000000000"),
        (("resolve", e.id, "--decision", "resume", "--note", "n" * 2001), "note"),
        (("list", "--limit", "5000"), "limit"),
        (("list", "--tenant", "a\x1bb"), "tenant"),
    ]:
        r = cli("escalations", *args, env=env)
        assert r.returncode == 2 and message in r.stderr, (args, r.stderr)
    missing = tmp_path / "typo.db"
    r = cli("escalations", "show", e.id, "--db", str(missing))
    assert r.returncode == 2 and "no escalations db" in r.stderr and not missing.exists()
    r = cli("escalations", "list", "--db", str(missing))
    assert (r.returncode, r.stdout) == (0, "") and not missing.exists()


@pytest.mark.slow  # a subprocess or a server
def test_the_cli_relay_delivers_to_the_configured_sinks_once(tmp_path):
    path = tmp_path / "escalations.db"
    s = SqliteEscalations(path)
    s.add_incident(TRIP)
    s.escalate(escalation())
    s.close()
    incidents = tmp_path / "incidents.jsonl"
    config = tmp_path / "config.yml"
    config.write_text(f"incidents:\n  file: {incidents}\n")
    r = cli("relay", "--once", "--db", str(path), "--config", str(config))
    assert r.returncode == 0 and "relayed 2 message(s) to file; 0 pending" in r.stderr, r.stderr
    assert len(incidents.read_text().splitlines()) == 1
    assert cli("relay", "--once", "--db", str(path), "--config", str(config)).returncode == 0
    assert len(incidents.read_text().splitlines()) == 1  # delivered rows are not delivered again
    nothing = cli("relay", "--once", "--db", str(path))
    assert nothing.returncode == 2 and "no target" in nothing.stderr


# ----------------------------------------------------------------------------- the server's routes

httpx = pytest.importorskip("httpx")
ADMIN = "escalation-admin-" + "c" * 24
API = "api-token-" + "d" * 24
PATH = "/v1/agent-breaker/escalations"


def admin(token: str = ADMIN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[Any, Path]]:
    """A real server on the shipped in-memory config, with an API token and the admin token, and
    the escalations file it reads (the test seeds it)."""
    pytest.importorskip("nemoguardrails")
    from _server import start

    path = tmp_path_factory.mktemp("served") / "escalations.db"
    env = {"AGENT_BREAKER_ADMIN_TOKEN": ADMIN, "AGENT_BREAKER_API_TOKEN": API, "AGENT_BREAKER_ESCALATIONS_DB": str(path)}
    srv = start(env, args=("--config", str(ROOT / "config" / "agent_breaker")), token=API)
    try:
        yield srv, path
    finally:
        srv.stop()


def test_the_routes_list_and_resolve_and_the_engine_sees_it(served):
    srv, path = served
    s = SqliteEscalations(path)
    e = s.escalate(escalation(session=f"http-{time.time_ns()}"))
    r = httpx.get(srv.base + PATH, headers=admin(), timeout=30)
    assert r.status_code == 200, r.text
    [row] = [d for d in r.json()["escalations"] if d["id"] == e.id]
    assert (row["session_id"], row["heuristic"], row["status"]) == (e.session, "unverified_claim", "open")
    newest = httpx.get(srv.base + PATH, params={"status": "open", "limit": "1"}, headers=admin(), timeout=30).json()
    assert [d["id"] for d in newest["escalations"]] == [e.id]
    theirs = s.escalate(escalation(session=f"http-other-{time.time_ns()}", tenant="globex", now=NOW - 1))
    only = httpx.get(srv.base + PATH, params={"tenant": "globex"}, headers=admin(), timeout=30).json()
    assert [d["id"] for d in only["escalations"]] == [theirs.id]
    done = srv.post(f"{PATH}/{e.id}", {"decision": "resume", "note": "checked by hand"}, headers=admin())
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["note"]) == ("resumed", "checked by hand")
    assert s.frozen("acme", e.session) is None  # the engine's view of the file
    again = srv.post(f"{PATH}/{e.id}", {"decision": "abort"}, headers=admin())
    assert again.status_code == 409 and "already resumed" in again.json()["error"]["message"]
    s.close()


def test_the_routes_take_the_admin_token_only(served):
    srv, _ = served
    assert httpx.get(srv.base + PATH, timeout=30).status_code == 401
    for token in ("not-the-admin-token-at-all", API):
        assert httpx.get(srv.base + PATH, headers=admin(token), timeout=30).status_code == 403
        assert srv.post(f"{PATH}/esc_0000000000000000", {"decision": "abort"}, headers=admin(token)).status_code == 403


def test_bad_input_gets_a_4xx_that_says_why_and_changes_nothing(served):
    srv, path = served
    s = SqliteEscalations(path)
    e = s.escalate(escalation(session=f"bad-{time.time_ns()}"))
    for target, body, status, message in [
        (f"{PATH}/esc_0000000000000000", {"decision": "abort"}, 404, "no escalation"),
        (f"{PATH}/esc_'%20OR%201=1%20--", {"decision": "abort"}, 422, "escalation id"),
        (f"{PATH}/esc_%0a0123456789abcde", {"decision": "abort"}, 422, "escalation id"),
        (f"{PATH}/{e.id}", {"decision": "delete"}, 422, "decision"),
        (f"{PATH}/{e.id}", {"decision": "abort", "note": "n" * 2001}, 422, "note"),
        (f"{PATH}/{e.id}", {"decision": "abort", "extra": 1}, 422, "extra"),
        (f"{PATH}?limit=%C2%B2", None, 422, "limit"),
        (f"{PATH}?limit=99999999999999999999", None, 422, "limit"),
        (f"{PATH}?status=closed", None, 422, "status"),
        (f"{PATH}?tenant=a%0Ab", None, 422, "tenant"),
        (f"{PATH}?config_id=nope", None, 404, "unknown config"),
    ]:
        if "?" in target:
            r = httpx.get(srv.base + target, headers=admin(), timeout=30)
        else:
            r = srv.post(target, body, headers=admin())
        assert r.status_code == status and message in r.json()["error"]["message"], (target, r.status_code, r.text)
    empty = srv.post_raw(f"{PATH}/{e.id}", b"", Authorization=f"Bearer {ADMIN}")
    assert empty.status_code == 422 and "body" in empty.json()["error"]["message"]
    assert s.get(e.id).status == "open"
    s.close()


@pytest.mark.slow  # a subprocess or a server
def test_the_routes_are_off_without_an_admin_token(tmp_path):
    pytest.importorskip("nemoguardrails")
    from _server import start

    env = {"AGENT_BREAKER_ESCALATIONS_DB": str(tmp_path / "e.db")}
    srv = start(env, args=("--config", str(ROOT / "config" / "agent_breaker")))
    try:
        # an API token passes the request guard; no route answers it
        assert httpx.get(srv.base + PATH, headers=srv.headers, timeout=30).status_code == 404
        assert srv.post(f"{PATH}/esc_0000000000000000", {"decision": "abort"}).status_code == 404
    finally:
        srv.stop()


def test_both_prefixes_are_admin_paths_and_a_route_reached_past_the_check_still_refuses():
    pytest.importorskip("nemoguardrails")
    from fastapi import FastAPI

    from agent_breaker.server import _is_admin_path, install_escalation_endpoints

    assert _is_admin_path(PATH) and _is_admin_path(PATH + "/esc_0123456789abcdef")
    assert _is_admin_path("/v1/agent-breaker/breakers/run_sql")
    assert not _is_admin_path(PATH + "x") and not _is_admin_path("/v1/agent-breaker/events")

    class NoConfigs:
        ids: list[str] = []

    app = FastAPI()
    install_escalation_endpoints(app, NoConfigs())  # type: ignore[arg-type]

    async def get() -> Any:
        # no request guard in front: nothing granted the admin token, whatever the request holds
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as client:
            return await client.get(PATH, headers=admin())

    r = asyncio.run(get())
    assert r.status_code == 403 and "admin token" in r.text


def test_without_a_config_id_the_list_holds_every_served_queue_and_resolve_finds_the_record(tmp_path):
    pytest.importorskip("nemoguardrails")
    from types import SimpleNamespace

    from fastapi import FastAPI

    from agent_breaker.server import install_escalation_endpoints
    from agent_breaker.server._guard import ADMIN_GRANTED, PARSED_BODY

    class TwoQueues:  # two served configs, each with its escalations in a file of its own
        ids = ["alpha", "beta"]

        def engine(self, config_id: str) -> Any:
            block = {"escalations": {"db": str(tmp_path / f"{config_id}.db"), "db_env": None}}
            return None, SimpleNamespace(config=parse_config(block))

    first = SqliteEscalations(tmp_path / "alpha.db").escalate(escalation(session="sa", now=NOW))
    second = SqliteEscalations(tmp_path / "beta.db").escalate(escalation(session="sb", now=NOW + 60))  # the newest
    app = FastAPI()
    install_escalation_endpoints(app, TwoQueues())  # type: ignore[arg-type]

    decision = {"decision": "resume"}

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        # what the request guard hands the routes: the admin token granted, the body parsed
        scope.setdefault("state", {}).update({ADMIN_GRANTED: True, PARSED_BODY: decision})
        await app(scope, receive, send)

    async def talk() -> list[Any]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=guarded), base_url="http://127.0.0.1") as client:
            return [
                await client.get(PATH),
                await client.get(PATH, params={"config_id": "alpha"}),
                await client.post(f"{PATH}/{second.id}"),
                await client.post(f"{PATH}/esc_0000000000000000"),
            ]

    both, alpha, resolved, missing = asyncio.run(talk())
    assert both.status_code == 200, both.text
    assert [(e["id"], e["configs"]) for e in both.json()["escalations"]] == [(second.id, ["beta"]), (first.id, ["alpha"])]
    assert [e["id"] for e in alpha.json()["escalations"]] == [first.id]
    assert resolved.status_code == 200 and resolved.json()["status"] == "resumed"
    assert SqliteEscalations(tmp_path / "beta.db").get(second.id).status == "resumed"
    assert missing.status_code == 404
