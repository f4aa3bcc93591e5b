"""`agent-breaker report`: the calibration report, on traces and incident files whose answers are known."""

from __future__ import annotations

import json
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent_breaker.cli import main
from agent_breaker.report import RULES, Rule, percentile

TAU = Path(__file__).resolve().parent / "traces" / "real-tau-bench.jsonl"
HOSTILE = "<script>alert(1)</script>"


def lines(path: Path, rows: list) -> Path:
    path.write_bytes(b"".join(r if isinstance(r, bytes) else (json.dumps(r) + "\n").encode() for r in rows))
    return path


def run(*args: str, capsys) -> tuple[int, str, str]:
    code = main(["report", *args])
    out, err = capsys.readouterr()
    return code, out, err


def report_json(*args: str, capsys) -> dict:
    code, out, err = run(*args, "--json", capsys=capsys)
    assert code == 0, err
    return json.loads(out)


def repeating(session: str, n: int, ts0: float, tenant: str = "t1", feature: str | None = "f1") -> list[dict]:
    """n runs of the same call with the same result, 10 tokens and $0.50 each: identical_call
    (max_repeats 3) warns on the fourth and trips on every later one."""
    events = []
    for i in range(n):
        who = {"session": session, "tenant": tenant, "feature": feature}
        events.append(
            {**who, "type": "tool_call", "tool": "lookup", "args": {"id": 1}, "call_id": f"c{i}", "ts": ts0 + 2 * i}
            | {"input_tokens": 10, "output_tokens": 0, "cost_usd": 0.5}
        )
        events.append(
            {
                **who,
                "type": "tool_result",
                "tool": "lookup",
                "call_id": f"c{i}",
                "ok": True,
                "result": {"v": 1},
                "ts": ts0 + 2 * i + 1,
            }
        )
    return events


@pytest.fixture
def trace(tmp_path) -> Path:
    """Session a is warned on call 4 and trips on calls 5 and 6 (repeats 4, 5), b is warned on call 4
    and trips on call 5 only (repeats 4), c never."""
    c = [
        {"session": "c", "tenant": "t2", "type": "tool_call", "tool": "search", "args": {"q": i}, "ts": 200 + i}
        | {"input_tokens": 5, "output_tokens": 5, "cost_usd": 0.1}
        for i in range(3)
    ]
    return lines(tmp_path / "trace.jsonl", repeating("a", 6, 0) + repeating("b", 5, 100) + c)


# ------------------------------------------------------------------ the figures


def test_a_trace_is_replayed_in_observe_mode_and_every_trip_is_counted(trace, capsys):
    r = report_json(str(trace), capsys=capsys)
    assert r["input"] == "trace"
    assert (r["sessions"], r["sessions_tripped"], r["trips"], r["warnings"]) == (3, 2, 3, 2)
    assert r["heuristics"] == [
        {
            "heuristic": "identical_call",
            "sessions": 2,
            "trips": 3,
            "block": 0,
            "warn": 3,
            "warned": 2,
            "sessions_ended": 2,
            # a's sixth call came after its first trip; b's first trip was its last call (a
            # warning stops nothing: the call ran)
            "stopped": {"tokens": 10, "cost_usd": 0.5, "steps": 1},
        }
    ]
    assert r["spent"] == {"tokens": 140, "cost_usd": 5.8, "steps": 14}
    assert r["stopped"] == {"tokens": 10, "cost_usd": 0.5, "steps": 1}


def test_figures_per_tenant_and_feature(trace, capsys):
    groups = report_json(str(trace), capsys=capsys)["groups"]
    assert groups == [
        {
            "tenant": "t1",
            "feature": "f1",
            "sessions": 2,
            "tripped": 2,
            "trips": 3,
            "spent": {"tokens": 110, "cost_usd": 5.5, "steps": 11},
            "stopped": {"tokens": 10, "cost_usd": 0.5, "steps": 1},
        },
        {
            "tenant": "t2",
            "feature": None,
            "sessions": 1,
            "tripped": 0,
            "trips": 0,
            "spent": {"tokens": 30, "cost_usd": 0.3, "steps": 3},
            "stopped": {"tokens": 0, "cost_usd": 0.0, "steps": 0},
        },
    ]


def test_only_a_session_ending_trip_stops_spend(tmp_path, capsys):
    # duplicate_mutation refuses one call; the session goes on, so nothing after it is saved
    pay = {"session": "p", "type": "tool_call", "tool": "pay", "args": {"to": "x"}, "mutating": True, "cost_usd": 1.0}
    ok = {"session": "p", "type": "tool_result", "tool": "pay", "ok": True, "result": {"id": "TX-100"}}
    r = report_json(str(lines(tmp_path / "t.jsonl", [pay, ok, pay, ok, pay])), capsys=capsys)
    assert [h["heuristic"] for h in r["heuristics"]] == ["duplicate_mutation"]
    assert r["heuristics"][0]["sessions_ended"] == 0
    assert r["stopped"] == {"tokens": 0, "cost_usd": 0.0, "steps": 0}
    assert r["spent"]["cost_usd"] == 3.0


def test_counter_percentiles_are_nearest_rank_values_that_occurred(trace, capsys):
    assert [percentile(list(range(1, 11)), p) for p in (50, 90, 99, 100)] == [5, 9, 10, 10]
    assert percentile([7.0], 50) == 7.0
    rows = {c["counter"]: c for c in report_json(str(trace), capsys=capsys)["counters"]}
    # the warnings' counters too (a: 3 warned, 4 and 5 tripped; b: 3 warned, 4 tripped)
    assert rows["repeats"] == {
        "heuristic": "identical_call",
        "counter": "repeats",
        "n": 5,
        "p50": 4,
        "p90": 5,
        "p99": 5,
        "max": 5,
    }
    assert rows["max_repeats"]["max"] == 3


def test_the_text_report_says_what_it_counted(trace, capsys):
    code, out, _ = run(str(trace), capsys=capsys)
    assert code == 0
    assert "tripped: 2 of 3 sessions, 3 trips reported" in out
    assert re.search(r"identical_call\s+2\s+3\s+0\s+3\s+2\s+2\s+10\s+\$0\.500000\s+1", out)
    assert "no suggestion" in out and "--legit" in out


# ------------------------------------------------------------------ suggested thresholds


def test_without_a_legit_set_no_threshold_is_suggested(trace, capsys):
    t = report_json(str(trace), capsys=capsys)["thresholds"]
    assert t["legit"] is None and t["suggestions"] == []
    assert "--legit" in t["note"]


def test_suggests_the_smallest_limit_that_lets_every_legit_session_through(trace, tmp_path, capsys):
    legit = tmp_path / "legit.txt"
    legit.write_text("# sessions that succeeded\nb\n\nnot-in-the-trace\n")
    t = report_json(str(trace), "--legit", str(legit), capsys=capsys)["thresholds"]
    assert t["legit"] == {"source": str(legit), "listed": 2, "in_input": 1}
    (s,) = t["suggestions"]
    assert s["setting"] == "identical_call.max_repeats" and s["limits_seen"] == [3]
    # b peaked at 4 repeats: 5 lets it through without even a warning, and a (5 repeats) is still caught
    assert (s["legit_sessions_tripped"], s["legit_peak"], s["suggested"]) == (1, 4, 5)
    assert (s["other_sessions_tripped"], s["other_sessions_caught"]) == (1, 1)


def test_a_limit_above_every_peak_catches_nothing_and_says_so(trace, tmp_path, capsys):
    legit = lines(tmp_path / "labels.jsonl", [{"session": "a", "kind": "legit"}, {"session": "b", "kind": "legit"}])
    (s,) = report_json(str(trace), "--legit", str(legit), capsys=capsys)["thresholds"]["suggestions"]
    assert (s["legit_peak"], s["suggested"], s["other_sessions_caught"]) == (5, 6, 0)


def test_no_suggestion_when_no_legit_session_was_cut(trace, tmp_path, capsys):
    legit = lines(tmp_path / "labels.jsonl", [{"session": "c", "kind": "legit"}, {"session": "a", "kind": "runaway"}])
    (s,) = report_json(str(trace), "--legit", str(legit), capsys=capsys)["thresholds"]["suggestions"]
    assert s["suggested"] is None and "cut no legit session" in s["why"]
    assert s["other_sessions_caught"] == 2


def test_a_setting_that_does_not_decide_every_legit_trip_suggests_nothing(tmp_path, capsys):
    polls = {"polls": 20, "max_polls": 15, "window_s": 600}
    slow = {"polls": 6, "waited_s": 4000.2, "max_wait_s": 3600}
    path = lines(
        tmp_path / "i.jsonl",
        [
            trip("ok", 1.0, "stuck_polling", 1, 0.0, counters=polls),
            trip("ok", 2.0, "stuck_polling", 1, 0.0, counters=slow),
            trip("steps", 3.0, "step_limit", 1, 0.0, counters={"steps": 7, "max_steps": 5}),
            trip("runaway", 4.0, "step_limit", 1, 0.0, counters={"steps": 9, "max_steps": 5}),
        ],
    )
    legit = tmp_path / "legit.txt"
    legit.write_text("ok\nsteps\n")
    rows = report_json(str(path), "--legit", str(legit), capsys=capsys)["thresholds"]["suggestions"]
    by_setting = {r["setting"]: r for r in rows}
    assert set(by_setting) == {"stuck_polling.max_polls", "stuck_polling.max_wait_s", "step_limit.max_steps"}
    for setting in ("stuck_polling.max_polls", "stuck_polling.max_wait_s"):
        assert by_setting[setting]["suggested"] is None
        assert "1 legit session(s) tripped on counters this setting does not decide" in by_setting[setting]["why"]
    # step_limit trips past its limit: 7 steps pass at max_steps 7, the 9-step run is still cut
    steps = by_setting["step_limit.max_steps"]
    assert (steps["suggested"], steps["other_sessions_tripped"], steps["other_sessions_caught"]) == (7, 1, 1)


def test_a_rule_rounds_up_past_the_peak_in_its_direction():
    by_setting = {r.setting: r for r in RULES}
    assert by_setting["identical_call.max_repeats"].passing(4) == 5  # trips at >= the limit
    assert by_setting["step_limit.max_steps"].passing(7) == 7  # trips only past it
    # counters are rounded: the value compared may sit just above the one reported
    assert by_setting["budget.max_tokens"].passing(1000) == 1001
    assert by_setting["budget.max_cost_usd"].passing(0.3) == 0.31
    assert by_setting["budget.max_cost_usd"].passing(0.304) == 0.31
    assert Rule("x", "v", "m", "x.m", step=0.1).passing(0.3) == 0.4


# ------------------------------------------------------------------ incidents files


def trip(session: str, ts: float, heuristic: str, tokens: int, cost: float, **extra) -> dict:
    return {
        "ts": ts,
        "session": session,
        "tenant": None,
        "feature": None,
        "agent": None,
        "heuristic": heuristic,
        "severity": "block",
        "scope": "session",
        "tool": "lookup",
        "reason": "r",
        "counters": {"repeats": tokens // 100, "max_repeats": 1},
        "tokens_so_far": tokens,
        "cost_usd_so_far": cost,
    } | extra


def breaker(tool: str, to: str) -> dict:
    return {"kind": "breaker", "event": f"breaker_{to}", "ts": 1.0, "tool": tool, "tenant": None, "from": "x", "to": to}


def test_an_incidents_file_counts_trips_breakers_and_the_spend_it_reveals(tmp_path, capsys):
    path = lines(
        tmp_path / "incidents.jsonl",
        [
            trip("s1", 30.0, "identical_call", 300, 3.0, kind="trip"),
            breaker("pay", "open"),
            trip("s1", 10.0, "identical_call", 100, 1.0),  # older line, no kind: a trip, and s1's first
            trip("s2", 20.0, "duplicate_mutation", 50, 0.5, severity="warn", counters={"since_s": 2.0}),
            breaker("pay", "half_open"),
            breaker("pay", "closed"),
            breaker("search", "open"),
        ],
    )
    r = report_json(str(path), capsys=capsys)
    assert r["input"] == "incidents" and r["sessions"] is None
    assert "largest tokens_so_far" in r["spend_basis"]
    assert (r["sessions_tripped"], r["trips"]) == (2, 3)
    assert r["breakers"] == [
        {"tool": "pay", "tenant": None, "transitions": 3, "to": {"closed": 1, "half_open": 1, "open": 1}},
        {"tool": "search", "tenant": None, "transitions": 1, "to": {"open": 1}},
    ]
    # s1: 300 known in all, first session-ending trip at 100; s2's trip ends nothing
    assert r["stopped"] == {"tokens": 200, "cost_usd": 2.0, "steps": None}
    assert r["spent"] == {"tokens": 350, "cost_usd": 3.5, "steps": None}
    rows = {h["heuristic"]: h for h in r["heuristics"]}
    assert (rows["identical_call"]["block"], rows["duplicate_mutation"]["warn"]) == (2, 1)


@pytest.fixture
def incidents_logger():
    """`replay --incidents` points the process's incidents logger at a file and stops it
    propagating: put it back after, so a later test reading the log through caplog still sees it."""
    logger = logging.getLogger("agent_breaker.incidents")
    handlers, level, propagate = list(logger.handlers), logger.level, logger.propagate
    yield
    for handler in logger.handlers:
        if handler not in handlers:
            handler.close()
    logger.handlers[:] = handlers
    logger.setLevel(level)
    logger.propagate = propagate


@pytest.mark.usefixtures("incidents_logger")
def test_the_replays_incidents_tell_the_same_story_as_its_trace(trace, tmp_path, capsys):
    incidents = tmp_path / "incidents.jsonl"
    assert main(["replay", str(trace), "--observe", "--incidents", str(incidents)]) == 0
    capsys.readouterr()
    from_trace = report_json(str(trace), capsys=capsys)
    from_incidents = report_json(str(incidents), capsys=capsys)
    assert from_incidents["counters"] == from_trace["counters"]
    # each session's last trip came on its last step: the incidents know its whole spend
    assert from_incidents["stopped"] == from_trace["stopped"] | {"steps": None}
    assert from_incidents["sessions_tripped"] == from_trace["sessions_tripped"]


def test_an_empty_file_is_a_report_of_nothing_tripped(tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    html = tmp_path / "out.html"
    r = report_json(str(path), "--html", str(html), capsys=capsys)
    assert (r["trips"], r["heuristics"]) == (0, [])
    assert 'class="plot"' not in html.read_text() and "nothing tripped" in html.read_text()


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (json.dumps(trip("s", 1.0, "h", 1, 0.1)).encode() + b"\n\xff\xfe\n", "line 2: not UTF-8"),
        (b'{"heuristic": "h", "session": ', "line 1: not JSON"),
        (b"[" * 100_000 + b"]" * 100_000 + b"\n", "line 1: nested too deep"),
        (b"[1, 2]\n", "line 1: neither a trace event"),
        (
            json.dumps(trip("s", 1.0, "h", 1, 0.1, tokens_so_far="many")).encode(),
            "line 1: 'tokens_so_far' must be a finite number",
        ),
        (json.dumps(trip(7, 1.0, "h", 1, 0.1)).encode(), "line 1: 'session' must be a non-empty string"),
        (json.dumps(trip("s", 1.0, "h", 1, 0.1, counters=[1])).encode(), "line 1: 'counters' must be an object"),
        (json.dumps(trip("s", 1.0, "h", 1, 0.1, severity="fatal")).encode(), "line 1: 'severity' must be"),
        (json.dumps(trip("s", 1.0, "h", 1, 0.1, kind="other")).encode(), "line 1: 'kind' must be"),
        (
            b"\n" + json.dumps(trip("s", 1.0, "h", 1, 0.1)).replace('"ts": 1.0', '"ts": 1e999').encode(),
            "line 2: 'ts' must be a finite",
        ),
        (json.dumps(trip("s", float("nan"), "h", 1, 0.1)).encode(), "line 1: 'ts' must be a finite"),
        (b'{"heuristic": "h", "ts": 1' + b"0" * 5000 + b"}\n", "line 1: Exceeds the limit"),
        (
            json.dumps(trip("s", 1.0, "h", 1, 0.1)).replace('"ts": 1.0', '"ts": 1' + "0" * 400).encode(),
            "line 1: 'ts' must be a finite",
        ),
        (json.dumps(trip("s", 1.0, "h", 1, 0.1, counters={"n": 10**400})).encode(), "line 1: counter 'n' must be a finite"),
        (b'{"session": "s", "type": "user", "text": "hi"}\n{"session": "s", "type": "tool_call"}\n', "line 2: session s: tool"),
        (b'{"session": "s", "type": "user", "text": "hi"}\n\xc3\x28\n', "line 2: not UTF-8"),
        (
            b'{"session": "s", "type": "user", "text": "hi"}\n{"session": "s", "type": "user", "ts": 1' + b"0" * 400 + b"}\n",
            "line 2",
        ),
        (
            b'{"session": "s", "type": "user", "text": "hi"}\n{"session": "s", "type": "user", "ts": 1' + b"0" * 5000 + b"}\n",
            "line 2",
        ),
    ],
    ids=lambda v: v[:40] if isinstance(v, str) else "",
)
def test_unreadable_input_is_refused_naming_the_line(tmp_path, capsys, content, message):
    path = tmp_path / "in.jsonl"
    path.write_bytes(content)
    code, out, err = run(str(path), capsys=capsys)
    assert code == 2 and out == ""
    assert message in err and str(path) in err


@pytest.mark.parametrize(
    ("cost_usd", "sessions", "message"),
    [
        (1.7e308, 1, "line 1: counter 'projected_cost_usd' must be a finite number, in the incident this event caused"),
        (6e307, 4, "adds up to more than a float holds"),
    ],
)
def test_spend_past_what_a_float_holds_is_refused(tmp_path, capsys, cost_usd, sessions, message):
    calls = [{"session": f"s{i}", "type": "tool_call", "tool": "t", "args": {}, "cost_usd": cost_usd} for i in range(sessions)]
    code, _, err = run(str(lines(tmp_path / "t.jsonl", calls)), capsys=capsys)
    assert code == 2 and message in err


def test_a_config_is_for_traces_only(tmp_path, capsys):
    config = tmp_path / "c.yml"
    config.write_text("mode: observe\n")
    path = lines(tmp_path / "i.jsonl", [trip("s", 1.0, "identical_call", 1, 0.1)])
    code, _, err = run(str(path), "--config", str(config), capsys=capsys)
    assert code == 2 and "--config applies to a trace" in err


def test_a_missing_file_is_refused(tmp_path, capsys):
    code, _, err = run(str(tmp_path / "nope.jsonl"), capsys=capsys)
    assert code == 2 and "cannot read" in err
    code, _, err = run(str(lines(tmp_path / "i.jsonl", [])), "--legit", str(tmp_path / "nope.txt"), capsys=capsys)
    assert code == 2 and "cannot read" in err


# ------------------------------------------------------------------ HTML


def test_hostile_names_are_escaped_everywhere(tmp_path, capsys):
    hostile = trip(
        HOSTILE,
        1.0,
        HOSTILE,
        100,
        1.0,
        tenant=HOSTILE,
        feature='"><img src=x onerror=alert(1)>',
        tool=HOSTILE,
        counters={HOSTILE: 3, "\x1b[31mred": 1},
    )
    escape = trip("t", 2.0, "\x1b[31mEVIL", 100, 1.0)  # a heuristic name is the input's too
    path = lines(tmp_path / "i.jsonl", [hostile, escape, breaker(HOSTILE, HOSTILE)])
    out_html = tmp_path / "out.html"
    code, out, _ = run(str(path), "--html", str(out_html), capsys=capsys)
    assert code == 0
    page = out_html.read_text()
    assert "<script>alert" not in page and "<img" not in page
    assert page.count("<script>") == 1  # the page's own
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x1b" not in out  # nor a terminal escape in the text


def test_numbers_at_the_ends_of_a_float_are_reported_and_drawn(tmp_path, capsys):
    far = [
        trip("s", ts, "identical_call", 1, 1e308, counters={"repeats": ts, "max_repeats": 4}) for ts in (-1.7e308, 1.7e308, 0.0)
    ]
    out_html = tmp_path / "out.html"
    code, out, _ = run(str(lines(tmp_path / "i.jsonl", far)), "--html", str(out_html), capsys=capsys)
    assert code == 0 and "$1e+308" in out
    assert not re.search(r'="[^"]*(nan|inf)', out_html.read_text())


def test_the_page_is_self_contained(trace, tmp_path, capsys):
    out_html = tmp_path / "out.html"
    assert run(str(trace), "--html", str(out_html), capsys=capsys)[0] == 0
    page = out_html.read_text()
    assert "Content-Security-Policy" in page and "default-src &#x27;none&#x27;" in page
    assert not re.search(r"\b(src|href)=|@import|url\(", page)
    assert set(re.findall(r"https?://[^\s\"']+", page)) == {"http://www.w3.org/2000/svg"}
    plots = re.findall(r'<svg class="plot" data-plot="([^"]+)"', page)
    assert plots[:2] == ["spend", "trips"] and "counter:identical_call:repeats" in plots


def rendered(page: Path) -> tuple[int, int]:
    """(plots, plots the browser marked rendered), from headless Chromium's DOM after load."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    dom = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    plots = re.findall(r'<svg class="plot"[^>]*>', dom)
    return len(plots), sum('data-rendered="1"' in p for p in plots)


def test_every_plot_renders_in_a_browser(trace, tmp_path, capsys):
    out_html = tmp_path / "out.html"
    assert run(str(trace), "--html", str(out_html), capsys=capsys)[0] == 0
    page = out_html.read_text()
    n = len(re.findall(r'<svg class="plot"', page))
    assert n >= 5
    assert rendered(out_html) == (n, n)
    # and a plot that draws nothing is not marked
    blank = tmp_path / "blank.html"
    blank.write_text(re.sub(r'<g class="marks">.*?</g>', '<g class="marks"></g>', page, count=1))
    assert rendered(blank) == (n, n - 1)


def test_the_report_of_a_real_run_renders_in_a_browser(tmp_path):
    out_html = tmp_path / "tau.html"
    proc = subprocess.run(
        [sys.executable, "-m", "agent_breaker.cli", "report", str(TAU), "--html", str(out_html)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "of 200 sessions" in proc.stdout
    n, marked = rendered(out_html)
    assert n >= 2 and marked == n
