"""The benchmarks' synthetic trace: deterministic (seeded), in the shared/spec/traces.md format.

    from benchmarks._trace import generate_trace, payload_stats, describe_payloads

`generate_trace(n_events, seed)` builds, in memory, many interleaved sessions of paired tool
calls and results, assistant and user turns, failures, polling, repeated and near-duplicate
calls, mutating tools with receipts, a brief outage of one tool, a few runaway sessions, and a
final answer per session. `payload="heavy"` gives the same sessions payload-heavy, shaped like
../shared/traces/real-*.jsonl: tool results of 1-8 KB (web pages, JSON records, file views,
command output) and thoughts of 200-2,000 characters, padded from a stable hash of the original
result / thought, so what repeats in the light trace repeats identically in the heavy one.

Used by bench_engine, bench_pieces and bench_peers; the same seed gives the same trace in each.
"""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any

from benchmarks._harness import percentiles

# --------------------------------------------------------------------------- vocabulary
# Neutral words only: no claim verbs (created, sent, updated, ...) and no negations, so that a
# final answer claims exactly the actions the generator put in its session.
_WORDS = [
    "account",
    "address",
    "alpha",
    "amount",
    "analysis",
    "annual",
    "api",
    "archive",
    "audit",
    "balance",
    "batch",
    "billing",
    "branch",
    "bucket",
    "budget",
    "cache",
    "campaign",
    "catalog",
    "channel",
    "checkout",
    "client",
    "cluster",
    "code",
    "cohort",
    "column",
    "config",
    "contract",
    "coupon",
    "credit",
    "customer",
    "dashboard",
    "data",
    "database",
    "delivery",
    "demand",
    "deploy",
    "detail",
    "device",
    "discount",
    "domain",
    "draft",
    "east",
    "email",
    "endpoint",
    "engine",
    "error",
    "estimate",
    "event",
    "export",
    "feature",
    "feedback",
    "field",
    "file",
    "filter",
    "forecast",
    "format",
    "gateway",
    "growth",
    "header",
    "history",
    "hosting",
    "import",
    "incident",
    "index",
    "inventory",
    "invoice",
    "issue",
    "item",
    "job",
    "journal",
    "key",
    "label",
    "latency",
    "ledger",
    "license",
    "limit",
    "line",
    "list",
    "log",
    "login",
    "margin",
    "market",
    "member",
    "message",
    "metric",
    "migration",
    "mobile",
    "model",
    "module",
    "monthly",
    "network",
    "node",
    "north",
    "note",
    "offer",
    "order",
    "owner",
    "package",
    "page",
    "partner",
    "payment",
    "pipeline",
    "plan",
    "platform",
    "policy",
    "pool",
    "portal",
    "price",
    "pricing",
    "product",
    "profile",
    "project",
    "promo",
    "quarter",
    "query",
    "queue",
    "quota",
    "rate",
    "record",
    "refund",
    "region",
    "release",
    "report",
    "request",
    "retention",
    "revenue",
    "review",
    "risk",
    "role",
    "route",
    "rule",
    "sales",
    "schema",
    "score",
    "search",
    "segment",
    "server",
    "service",
    "session",
    "shipment",
    "signal",
    "sku",
    "south",
    "spend",
    "sprint",
    "stack",
    "storage",
    "store",
    "subscription",
    "summary",
    "supplier",
    "support",
    "survey",
    "table",
    "target",
    "task",
    "team",
    "template",
    "tenant",
    "ticket",
    "tier",
    "token",
    "trend",
    "usage",
    "user",
    "vendor",
    "version",
    "volume",
    "warehouse",
    "webhook",
    "weekly",
    "west",
    "widget",
    "window",
    "workflow",
    "zone",
]
_NAMES = [
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "mallory",
    "nina",
    "oscar",
    "peggy",
    "rupert",
    "sybil",
    "trent",
    "victor",
    "wendy",
]
_REGIONS = ("eu-west", "eu-central", "us-east", "us-west", "ap-south", "ap-northeast")
_TENANTS = ("acme", "globex", "initech", "umbrella", "hooli")
_FEATURES = ("assistant", "ops-agent", "billing")
_MODELS = {"gpt-4o": (2.5e-6, 10e-6), "claude-sonnet": (3e-6, 15e-6), "gpt-4o-mini": (0.15e-6, 0.6e-6)}

READ_TOOLS = ("search_docs", "get_customer", "list_orders", "read_file", "fetch_url", "query_db", "lookup_lead", "get_invoice")
MUTATING_TOOLS = ("create_ticket", "send_email", "update_record")  # inferred mutating by name
SUBMIT_TOOL, POLL_TOOL = "submit_job", "get_job_status"  # "*status*": a polling tool
OUTAGE_TOOL = "fetch_url"

_TRANSIENT_ERRORS = ("timeout after 30s", "503 Service Unavailable", "connection reset by peer", "429 Too Many Requests")
_HARD_ERRORS = ("invalid argument: unknown column 'region_id'", "permission denied for table orders", "404 not found")


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def _text(rng: random.Random, lo: int, hi: int) -> str:
    """Random prose of lo..hi characters."""
    target = rng.randint(lo, hi)
    out: list[str] = []
    size = 0
    while size < target:
        w = rng.choice(_WORDS) if rng.random() > 0.08 else str(rng.randint(1, 99999))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:target].strip()


# --------------------------------------------------------------------------- trace generator
class _Session:
    """Writes the events of one session, with its own clock, to an exact length."""

    def __init__(
        self, rng: random.Random, index: int, length: int, start: float, outage: tuple[float, float], runaway: str | None
    ) -> None:
        self.rng = rng
        self.sid = f"run-{rng.getrandbits(48):012x}"
        self.index = index
        self.length = length
        self.t = start
        self.outage = outage
        self.runaway = runaway
        self.runaway_at = int(length * rng.uniform(0.5, 0.85)) if runaway else None
        self.tenant = rng.choice(_TENANTS)
        self.feature = rng.choice(_FEATURES)
        self.model = rng.choice(tuple(_MODELS))
        self.multi_agent = rng.random() < 0.2
        self.agent = "worker" if self.multi_agent else rng.choice(("support-bot", "analyst", None))
        self.topic = _words(rng, 3)
        self.events: list[dict[str, Any]] = []
        self.n_calls = 0
        self.last_ok: tuple[str, dict[str, Any], Any, str] | None = None  # tool, args, result, thought
        self.refs: list[tuple[str, str]] = []  # (tool, reference id) from mutating results
        self.jobs = 0

    # ---- low level
    @property
    def room(self) -> int:
        """Events left before the final answer."""
        return self.length - 1 - len(self.events)

    def _emit(self, ev: dict[str, Any], gap: float, agent: str | None = None, depth: int | None = None) -> dict[str, Any]:
        self.t += gap
        head: dict[str, Any] = {"session": self.sid, "ts": round(self.t, 3), "tenant": self.tenant, "feature": self.feature}
        agent = agent if agent is not None else self.agent
        if agent is not None:
            head["agent"] = agent
        if depth is not None:
            head["depth"] = depth
        head.update(ev)
        self.events.append(head)
        return head

    def _spend(self) -> dict[str, Any]:
        rng = self.rng
        it, ot = rng.randint(400, 3500), rng.randint(30, 450)
        pin, pout = _MODELS[self.model]
        return {"input_tokens": it, "output_tokens": ot, "cost_usd": round(it * pin + ot * pout, 6), "model": self.model}

    def call(self, tool: str, args: dict[str, Any], thought: str, *, gap: float | None = None) -> str:
        self.n_calls += 1
        cid = f"c{self.n_calls}"
        ev: dict[str, Any] = {"type": "tool_call", "tool": tool, "args": args, "call_id": cid}
        ev.update(self._spend())
        ev["thought"] = thought
        depth = 1 if self.multi_agent else None
        self._emit(ev, self.rng.uniform(0.8, 6.0) if gap is None else gap, depth=depth)
        return cid

    def result(self, tool: str, cid: str, ok: bool, result: Any = None, error: str | None = None) -> None:
        latency = round(self.rng.lognormvariate(5.5, 0.8), 1)  # ~250 ms median
        ev: dict[str, Any] = {"type": "tool_result", "tool": tool, "call_id": cid, "ok": ok}
        if result is not None:
            ev["result"] = result
        if error is not None:
            ev["error"] = error
        ev["latency_ms"] = latency
        self._emit(ev, latency / 1000.0, depth=1 if self.multi_agent else None)

    def in_outage(self, tool: str) -> bool:
        # the result comes back within a few seconds of the call's ts
        return tool == OUTAGE_TOOL and self.outage[0] <= self.t <= self.outage[1]

    # ---- payloads
    def read_args(self, tool: str) -> dict[str, Any]:
        rng = self.rng
        args: dict[str, Any] = {"query": f"{self.topic} {_text(rng, 50, 200)}"}
        if rng.random() < 0.7:
            args["limit"] = rng.choice((5, 10, 20, 50))
        if rng.random() < 0.5:
            args["filters"] = {"region": rng.choice(_REGIONS), "since": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"}
        if rng.random() < 0.4:
            args["request_id"] = f"{rng.getrandbits(64):016x}"  # volatile: ignored when comparing calls
        if tool == "read_file":
            args["path"] = f"/srv/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{rng.randint(1, 999)}.md"
        return args

    def read_result(self) -> dict[str, Any]:
        rng = self.rng
        rows = [
            {"id": rng.randint(10_000, 999_999), "title": _words(rng, rng.randint(2, 5)), "snippet": _text(rng, 60, 140)}
            for _ in range(rng.randint(1, 4))
        ]
        return {"rows": rows, "total": rng.randint(len(rows), 500), "next_cursor": f"{rng.getrandbits(32):08x}"}

    def thought(self) -> str:
        return _words(self.rng, self.rng.randint(8, 12))

    # ---- steps (each knows how many events it needs)
    def step_read(self) -> None:
        rng = self.rng
        tool = rng.choice(READ_TOOLS)
        args, thought = self.read_args(tool), self.thought()
        cid = self.call(tool, args, thought)
        if self.in_outage(tool):
            self.result(tool, cid, False, error="503 Service Unavailable")
            return
        r = rng.random()
        if r < 0.025:  # transport failure, usually transient; often retried once with the same args
            error = rng.choice(_TRANSIENT_ERRORS) if rng.random() < 0.8 else rng.choice(_HARD_ERRORS)
            self.result(tool, cid, False, error=error)
            if self.room >= 2 and rng.random() < 0.7:
                cid = self.call(tool, dict(args), thought, gap=rng.uniform(1.0, 4.0))
                res = self.read_result()
                self.result(tool, cid, True, res)
                self.last_ok = (tool, args, res, thought)
            return
        if r < 0.035:  # semantic failure: ok transport, error payload
            self.result(tool, cid, True, {"status": "error", "error": rng.choice(_HARD_ERRORS)})
            return
        res = self.read_result()
        self.result(tool, cid, True, res)
        self.last_ok = (tool, args, res, thought)

    def step_repeat(self) -> None:
        """The same call again right away (key order shuffled, volatile id changed): same result."""
        assert self.last_ok is not None
        tool, args, res, thought = self.last_ok
        keys = list(args)
        self.rng.shuffle(keys)
        again = {k: args[k] for k in keys}
        if "request_id" in again:
            again["request_id"] = f"{self.rng.getrandbits(64):016x}"
        cid = self.call(tool, again, thought)
        self.result(tool, cid, True, res)
        self.last_ok = None  # never three in a row

    def step_near_duplicate(self) -> None:
        """The same query reworded slightly (one word changed, spacing), same result."""
        assert self.last_ok is not None
        tool, args, res, thought = self.last_ok
        words = str(args["query"]).split()
        words[self.rng.randrange(len(words))] = self.rng.choice(_WORDS)
        again = dict(args, query="  ".join(words) if self.rng.random() < 0.5 else " ".join(words))
        cid = self.call(tool, again, thought + " again")
        self.result(tool, cid, True, res)
        self.last_ok = None

    def step_mutating(self) -> None:
        rng = self.rng
        tool = rng.choice(MUTATING_TOOLS)
        if tool == "send_email":
            args: dict[str, Any] = {
                "to": f"{rng.choice(_NAMES)}@{self.tenant}.example",
                "subject": _text(rng, 20, 60),
                "body": _text(rng, 100, 200),
            }
            ref = f"MSG-{rng.randint(100000, 999999)}"
        elif tool == "create_ticket":
            args = {
                "title": _text(rng, 30, 80),
                "description": _text(rng, 80, 200),
                "priority": rng.choice(("low", "normal", "high")),
            }
            ref = f"TCK-{rng.randint(10000, 99999)}"
        else:
            args = {"record_id": rng.randint(1000, 99999), "fields": {"owner": rng.choice(_NAMES), "note": _text(rng, 50, 150)}}
            ref = f"REC-{rng.randint(10000, 99999)}"
        cid = self.call(tool, args, self.thought())
        self.result(tool, cid, True, {"id": ref, "status": "ok", "at": f"2025-06-{rng.randint(1, 28):02d}T10:00:00Z"})
        self.refs.append((tool, ref))

    def step_polling(self) -> None:
        """Submit a job, poll its status (unchanged for a few polls, then moving), get it done."""
        rng = self.rng
        self.jobs += 1
        job = f"JOB-{rng.randint(100000, 999999)}"
        cid = self.call(
            SUBMIT_TOOL, {"kind": rng.choice(("export", "reindex", "report")), "params": {"topic": self.topic}}, self.thought()
        )
        self.result(SUBMIT_TOOL, cid, True, {"job_id": job, "status": "queued"})
        polls = min(rng.randint(2, 9), (self.room - 4) // 2)
        progress = 0
        thought = f"check whether job {job} has finished yet"
        for _ in range(max(polls, 0)):
            if rng.random() < 0.4:
                progress = min(progress + rng.randint(5, 30), 95)
            cid = self.call(POLL_TOOL, {"job_id": job}, thought, gap=rng.uniform(2.0, 10.0))
            self.result(POLL_TOOL, cid, True, {"job_id": job, "status": "running", "progress": progress})
        cid = self.call(POLL_TOOL, {"job_id": job}, thought, gap=rng.uniform(2.0, 10.0))
        self.result(
            POLL_TOOL, cid, True, {"job_id": job, "status": "succeeded", "progress": 100, "output": f"s3://exports/{job}.csv"}
        )

    def step_assistant(self, text: str | None = None, agent: str | None = None) -> None:
        ev: dict[str, Any] = {"type": "assistant", "text": text or _text(self.rng, 80, 260)}
        ev.update(self._spend())
        if self.multi_agent and agent is None:
            agent = self.rng.choice(("planner", "worker"))
        self._emit(
            ev, self.rng.uniform(1.0, 5.0), agent=agent, depth=(0 if agent == "planner" else 1) if self.multi_agent else None
        )

    def step_user(self) -> None:
        self._emit({"type": "user", "text": f"{_text(self.rng, 20, 120)}?"}, self.rng.uniform(5.0, 40.0), agent=None)

    # ---- runaways (a few sessions): the guard is meant to stop these
    def run_away(self) -> None:
        rng = self.rng
        kind = self.runaway
        if kind == "identical_call":
            tool = rng.choice(READ_TOOLS)
            args, thought = self.read_args(tool), self.thought()
            res = self.read_result()
            for _ in range(min(6, self.room // 2)):
                self.result(tool, self.call(tool, dict(args), thought), True, res)
        elif kind == "identical_failure":
            tool = rng.choice(READ_TOOLS)
            args, thought, err = self.read_args(tool), self.thought(), rng.choice(_HARD_ERRORS)
            for _ in range(min(5, self.room // 2)):
                self.result(tool, self.call(tool, dict(args), thought), False, error=err)
        elif kind == "oscillation":
            a, b = rng.sample(READ_TOOLS, 2)
            pa, pb = (self.read_args(a), self.read_result()), (self.read_args(b), self.read_result())
            for i in range(min(6, self.room // 2)):
                tool, (args, res) = (a, pa) if i % 2 == 0 else (b, pb)
                self.result(tool, self.call(tool, dict(args), self.thought()), True, res)
        elif kind == "stuck_polling":
            job = f"JOB-{rng.randint(100000, 999999)}"
            for _ in range(min(18, self.room // 2)):
                cid = self.call(
                    POLL_TOOL, {"job_id": job}, f"check whether job {job} has finished yet", gap=rng.uniform(2.0, 6.0)
                )
                self.result(POLL_TOOL, cid, True, {"job_id": job, "status": "running", "progress": 40})
        elif kind == "semantic_echo":
            base = _text(rng, 100, 200).split()
            for _ in range(min(4, self.room)):
                words = list(base)
                rng.shuffle(words)
                self.step_assistant(" ".join(words), agent="worker" if self.multi_agent else None)
        self.runaway = None

    def final(self) -> None:
        text = f"Summary for {self.topic}: {_text(self.rng, 60, 200)}."
        if self.refs:
            tool, ref = self.rng.choice(self.refs)
            what = {
                "create_ticket": "I opened ticket",
                "send_email": "The email went out as",
                "update_record": "The record change is",
            }[tool]
            text += f" {what} {ref}."
        self._emit({"type": "final", "text": text}, self.rng.uniform(1.0, 5.0), agent="planner" if self.multi_agent else None)

    def build(self) -> list[dict[str, Any]]:
        rng = self.rng
        self.step_user()
        while self.room > 0:
            room = self.room
            if self.runaway and len(self.events) >= (self.runaway_at or 0) and room >= 12:
                self.run_away()
                continue
            r = rng.random()
            if room >= 4 and r < 0.05:
                self.step_polling()
            elif room >= 2 and r < 0.09:
                self.step_mutating()
            elif room >= 2 and r < 0.13 and self.last_ok is not None:
                self.step_repeat()
            elif room >= 2 and r < 0.17 and self.last_ok is not None:
                self.step_near_duplicate()
            elif r < 0.27 or room < 2:
                self.step_assistant()
            elif r < 0.285:
                self.step_user()
            else:
                self.step_read()
        self.final()
        assert len(self.events) == self.length, (len(self.events), self.length)
        return self.events


RUNAWAY_KINDS = ("identical_call", "identical_failure", "oscillation", "stuck_polling", "semantic_echo")


def generate_trace(
    n_events: int, seed: int, n_sessions: int = 500, runaway_share: float = 0.04, payload: str = "light"
) -> list[dict[str, Any]]:
    """A deterministic trace of exactly n_events events, sessions interleaved by time; `payload`
    "heavy" pads the same events' results and thoughts (see heavy_payloads)."""
    if payload not in PAYLOADS:
        raise ValueError(f"payload must be one of {PAYLOADS}, not {payload!r}")
    rng = random.Random(seed)
    n_sessions = max(1, min(n_sessions, n_events // 12))
    weights = [rng.uniform(0.5, 1.5) for _ in range(n_sessions)]
    total = sum(weights)
    lengths = [max(12, int(w * n_events / total)) for w in weights]
    diff = n_events - sum(lengths)
    while diff:  # fix the rounding: +-1 on random sessions that can take it
        i = rng.randrange(n_sessions)
        if diff > 0:
            lengths[i] += 1
            diff -= 1
        elif lengths[i] > 12:
            lengths[i] -= 1
            diff += 1
    base = 1_760_000_000.0
    # sessions start over a span about twice a session's duration: ~1/3 of them run at once
    span = 2.0 * (n_events / n_sessions) * 3.0
    outage = (base + span * 0.4, base + span * 0.4 + 40.0)  # one tool down for 40 s
    events: list[tuple[float, int, int, dict[str, Any]]] = []
    for i, length in enumerate(lengths):
        srng = random.Random(rng.getrandbits(64))
        runaway = srng.choice(RUNAWAY_KINDS) if srng.random() < runaway_share else None
        s = _Session(srng, i, length, base + rng.uniform(0, span), outage, runaway)
        for j, ev in enumerate(s.build()):
            events.append((ev["ts"], i, j, ev))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    light = [e[3] for e in events]
    return heavy_payloads(light, seed) if payload == "heavy" else light


# --------------------------------------------------------------------------- payload-heavy profile
PAYLOADS = ("light", "heavy")
HEAVY_RESULT_BYTES = (1024, 8192)  # JSON size of a padded tool result (uniform)
HEAVY_THOUGHT_CHARS = (200, 2000)  # length of a padded thought (uniform)
# the shape of a padded result per tool, after ../shared/traces/real-*.jsonl:
#   page    - a WebShop observation: a search result page as text ("output")
#   tau     - tau-bench: JSON records serialized into a string ("output")
#   records - the same kind of records as a JSON list ("records")
#   file    - SWE-agent's file viewer: numbered source lines ("output")
#   shell   - OpenHands / SWE-agent command output, \r\n line ends and a prompt ("output")
_HEAVY_SHAPE = {
    "search_docs": "page",
    "fetch_url": "page",
    "get_customer": "tau",
    "get_invoice": "tau",
    "lookup_lead": "tau",
    "list_orders": "records",
    "query_db": "records",
    "read_file": "file",
    SUBMIT_TOOL: "shell",
    POLL_TOOL: "shell",
    "create_ticket": "tau",
    "send_email": "tau",
    "update_record": "tau",
}
_HEAVY_FIELD = {"page": "output", "tau": "output", "records": "records", "file": "output", "shell": "output"}
_UPPER_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _hash_rng(*key: Any) -> random.Random:
    """A generator seeded by a stable hash of `key` (blake2b of its repr: PYTHONHASHSEED does not matter)."""
    return random.Random(int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big"))


class _Corpus:
    """Pieces of payload text made once from a fixed seed (a few seconds' work spared per
    trace): a payload is a run of consecutive pieces from an offset its hash picks. Each piece
    is kept with its length in the trace's JSON, to fill a byte budget without re-encoding."""

    def __init__(self, pieces: list[str], sizes: list[int]) -> None:
        self.pieces, self.sizes = pieces, sizes

    @classmethod
    def of(cls, pieces: list[str], newline: str = "") -> _Corpus:
        # JSON length of a piece inside a string, plus the separator that joins it
        return cls(pieces, [len(json.dumps(x)) - 2 + len(json.dumps(newline)) - 2 for x in pieces])

    def run(self, rng: random.Random, budget: int) -> list[str]:
        i = rng.randrange(len(self.pieces))
        out: list[str] = []
        size = 0
        while size < budget:
            out.append(self.pieces[i])
            size += self.sizes[i]
            i = (i + 1) % len(self.pieces)
        return out


_CORPORA: dict[str, Any] = {}


def _corpora() -> dict[str, Any]:
    if _CORPORA:
        return _CORPORA
    rng = random.Random(0x5EED)
    # prose: 4 MB of sentences of neutral words (two 2,000-character runs rarely overlap)
    words = rng.choices(_WORDS, k=600_000)
    sentences: list[str] = []
    i = 0
    while i < len(words):
        k = rng.randint(6, 18)
        sentence = " ".join(words[i : i + k])
        sentences.append(sentence[0].upper() + sentence[1:] + rng.choice((".", ".", ".", ":", ";", "?")))
        i += k
    _CORPORA["prose"] = prose = " ".join(sentences)
    _CORPORA["sentence_starts"] = starts = [0]
    for sentence in sentences[:-1]:
        starts.append(starts[-1] + len(sentence) + 1)

    def snippet(lo: int, hi: int) -> str:
        return _prose_at(prose, starts, rng.randrange(len(starts)), rng.randint(lo, hi))

    # WebShop search results: [ASIN] title price
    items = []
    for _ in range(20_000):
        asin = "B0" + "".join(rng.choices(_UPPER_ALNUM, k=8))
        title = " ".join(w.capitalize() for w in rng.choices(_WORDS, k=rng.randint(8, 24)))
        items.append(f"[{asin}] \n{title} \n${rng.randint(3, 400)}.{rng.randint(0, 99):02d} \n")
    _CORPORA["page"] = _Corpus.of(items)
    # tau-bench-like records: a customer with an address, payment methods, nested items
    records = []
    for _ in range(6_000):
        first, last = rng.choice(_NAMES).capitalize(), rng.choice(_WORDS).capitalize()
        record = {
            "user_id": f"{first.lower()}_{last.lower()}_{rng.randint(1000, 9999)}",
            "name": {"first_name": first, "last_name": last},
            "address": {
                "address1": f"{rng.randint(1, 999)} {rng.choice(_WORDS).capitalize()} Drive",
                "city": rng.choice(_WORDS).capitalize(),
                "country": "USA",
                "zip": f"{rng.randint(10000, 99999)}",
            },
            "email": f"{first.lower()}.{last.lower()}{rng.randint(1, 9999)}@example.com",
            "payment_methods": {
                f"credit_card_{n}": {"source": "credit_card", "brand": rng.choice(("visa", "amex")), "last_four": str(n)[-4:]}
                for n in (rng.randint(1_000_000, 9_999_999) for _ in range(rng.randint(1, 3)))
            },
            "items": [
                {"sku": f"SKU-{rng.randint(10000, 99999)}", "qty": rng.randint(1, 9), "price": round(rng.uniform(3, 900), 2)}
                for _ in range(rng.randint(1, 4))
            ],
            "membership": rng.choice(("regular", "silver", "gold")),
            "note": snippet(20, 160),
        }
        records.append(json.dumps(record))
    # as a JSON list in the result (records), or that list serialized into a string (tau)
    _CORPORA["records"] = _Corpus(records, [len(x) + 2 for x in records])
    _CORPORA["tau"] = _Corpus(records, [len(json.dumps(x)) for x in records])
    # SWE-agent's file viewer: source lines (numbered when used)
    lines = []
    for _ in range(30_000):
        a, b, c = rng.choices(_WORDS, k=3)
        indent = " " * (4 * rng.randint(0, 3))
        lines.append(
            rng.choice(
                (
                    f"{indent}{a}_{b} = {c}({a}, {rng.randint(0, 99)})",
                    f"{indent}def {a}_{b}(self, {c}):",
                    f"{indent}if {a}.{b} is None:",
                    f"{indent}return {{'{a}': {b}, '{c}': {rng.randint(0, 999)}}}",
                    f"{indent}# {snippet(20, 70)}",
                    "",
                )
            )
        )
    _CORPORA["file"] = _Corpus.of(lines, "\n")
    # command output: a listing, log lines, grep hits
    shell = []
    for _ in range(30_000):
        a, b = rng.choices(_WORDS, k=2)
        r = rng.random()
        if r < 0.4:
            shell.append(f"-rw-r--r--  1 root root {rng.randint(100, 200000):>7} Apr 30 08:{rng.randint(10, 59)} {a}_{b}.py")
        elif r < 0.8:
            stamp = f"2025-06-{rng.randint(1, 28):02d} 10:{rng.randint(10, 59)}:{rng.randint(10, 59)}"
            shell.append(f"[{stamp}] INFO {snippet(40, 90)}")
        else:
            shell.append(f"{a}/{b}.py:{rng.randint(1, 900)}: {snippet(30, 60)}")
    _CORPORA["shell"] = _Corpus.of(shell, "\r\n")
    return _CORPORA


def _prose_at(prose: str, starts: list[int], sentence: int, n_chars: int) -> str:
    """About n_chars of prose from a sentence start on (cut at a word end)."""
    if n_chars <= 0:
        return ""
    at = starts[sentence % len(starts)]
    if at + n_chars > len(prose):
        at = 0
    text = prose[at : at + n_chars + 1]
    return text[:n_chars] if len(text) <= n_chars or text[n_chars] == " " else text[:n_chars].rsplit(" ", 1)[0]


def _prose(rng: random.Random, n_chars: int) -> str:
    c = _corpora()
    return _prose_at(c["prose"], c["sentence_starts"], rng.randrange(len(c["sentence_starts"])), n_chars)


def heavy_result(seed: int, tool: str, result: dict[str, Any]) -> dict[str, Any]:
    """The result with one payload field added (keys the engine reads - status, error, ok,
    success, progress, ids - untouched), sized 1-8 KB of JSON; a function of (seed, tool, result)."""
    canonical = json.dumps(result, sort_keys=True)
    rng = _hash_rng(seed, "result", tool, canonical)
    target = rng.randint(*HEAVY_RESULT_BYTES)
    budget = max(0, target - len(json.dumps(result)) - 16)
    failed = str(result.get("status", "")).lower() == "error"
    shape = "shell" if failed else _HEAVY_SHAPE.get(tool, "page")
    c = _corpora()
    padded: Any
    if shape == "page":
        head = f"[Back to Search] \nPage {rng.randint(1, 5)} (Total results: {rng.randint(20, 500)}) \n[Next >] \n"
        padded = head + "".join(c["page"].run(rng, budget - len(head) - 6))
    elif shape == "records":
        padded = json.loads("[" + ", ".join(c["records"].run(rng, budget)) + "]")  # fresh objects each result
    elif shape == "tau":
        padded = "[" + ", ".join(c["tau"].run(rng, budget)) + "]"
    elif shape == "file":
        path = f"/srv/{rng.choice(_WORDS)}/{rng.choice(_WORDS)}_{rng.randint(1, 999)}.py"
        first = rng.randint(1, 400)
        head = f"[File: {path} ({first + rng.randint(200, 3000)} lines total)]\n({first - 1} more lines above)\n"
        body = c["file"].run(rng, budget - len(head) - 8)
        padded = head + "\n".join(f"{first + i}:{line}" for i, line in enumerate(body))
    else:
        cmd = f"{rng.choice(('ls -l', 'cat', 'python', 'pytest -q', 'grep -rn'))} /workspace/{rng.choice(_WORDS)}"
        tail = "\r\n[Python Interpreter: /opt/miniconda3/envs/testbed/bin/python]\nroot@workspace:/workspace # "
        if failed:
            tail = (
                "\r\nTraceback (most recent call last):\r\n"
                f'  File "/workspace/{rng.choice(_WORDS)}.py", line {rng.randint(1, 900)}, in {rng.choice(_WORDS)}\r\n'
                f"ValueError: {_prose(rng, 60)}{tail}"
            )
        padded = cmd + "\r\n" + "\r\n".join(c["shell"].run(rng, budget - len(cmd) - len(tail) - 30)) + tail
    return {**result, _HEAVY_FIELD[shape]: padded}


def heavy_thought(seed: int, tool: str, thought: str) -> str:
    """The thought led by 200-2,000 characters of reasoning prose. A near-duplicate's thought
    (the original + " again") gets its original's lead: it stays a near-duplicate."""
    base = thought.removesuffix(" again")
    rng = _hash_rng(seed, "thought", tool, base)
    lead = _prose(rng, rng.randint(*HEAVY_THOUGHT_CHARS) - len(thought) - 1)
    return f"{lead} {thought}" if lead else thought


def heavy_payloads(events: list[dict[str, Any]], seed: int) -> list[dict[str, Any]]:
    """The payload-heavy version of a trace: every dict result of a tool result padded to 1-8 KB,
    every thought of a tool call to 200-2,000 characters; everything else as it was. Padding is
    a pure function of (seed, tool, original payload), never a fresh draw, so identical calls
    and results stay identical (and results shared by repeats stay one object, as generated)."""
    results: dict[tuple[str, str], dict[str, Any]] = {}
    thoughts: dict[tuple[str, str], str] = {}
    out: list[dict[str, Any]] = []
    for ev in events:
        kind = ev["type"]
        if kind == "tool_call" and ev.get("thought"):
            key = (ev["tool"], ev["thought"])
            thought = thoughts.get(key)
            if thought is None:
                thought = thoughts[key] = heavy_thought(seed, *key)
            ev = dict(ev, thought=thought)
        elif kind == "tool_result" and isinstance(ev.get("result"), dict):
            rkey = (ev["tool"], json.dumps(ev["result"], sort_keys=True))
            result = results.get(rkey)
            if result is None:
                result = results[rkey] = heavy_result(seed, ev["tool"], ev["result"])
            ev = dict(ev, result=result)
        out.append(ev)
    return out


def payload_stats(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Sizes of the payloads a trace carries: JSON bytes of results, characters of thoughts."""

    def spread(xs: list[int]) -> dict[str, int]:
        if not xs:
            return {"n": 0}
        low, p50, p90, high = percentiles(xs, (0, 50, 90, 100))
        return {"n": len(xs), "min": low, "p50": p50, "p90": p90, "max": high}

    results = [len(json.dumps(ev["result"])) for ev in events if ev["type"] == "tool_result" and "result" in ev]
    thoughts = [len(ev["thought"]) for ev in events if ev["type"] == "tool_call" and ev.get("thought")]
    return {"result_json_bytes": spread(results), "thought_chars": spread(thoughts)}


def describe_payloads(stats: dict[str, Any]) -> str:
    def one(d: dict[str, int]) -> str:
        return "none" if not d["n"] else f"min {d['min']:,} / p50 {d['p50']:,} / p90 {d['p90']:,} / max {d['max']:,}"

    return f"result JSON bytes {one(stats['result_json_bytes'])}; thought chars {one(stats['thought_chars'])}"
