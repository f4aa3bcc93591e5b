"""Shared helpers for the corpus converters (stdlib + orjson only; no agent_breaker import).

Every converter reads blobs from a fetched mirror (a bare git directory under /work/.mirror) and
writes $AGENT_BREAKER_CORPUS/<source>.jsonl.gz (the trace, shared/spec/traces.md) plus
$AGENT_BREAKER_CORPUS/<source>.runs.jsonl (one line per session: the benchmark outcome as recorded upstream).
"""

import gzip
import os
import re as _re
import subprocess
import sys

import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: where the corpus is written and read: never inside the repository (what is converted from
#: fetched repositories is not committed; these scripts rebuild it)
EVAL = os.path.expanduser(os.environ.get("AGENT_BREAKER_CORPUS") or "~/.cache/agent-breaker/corpus")
MIRRORS = os.environ.get("CORPUS_MIRRORS", "/work/.mirror")
CUT = 2000


def gitdir(owner_repo):
    return os.path.join(MIRRORS, owner_repo.replace("/", "+"), "repo")


def git(owner_repo, *args):
    return subprocess.run(["git", "--git-dir", gitdir(owner_repo), *args], check=True, capture_output=True).stdout


def blob(owner_repo, sha_or_spec):
    """Bytes of a blob, by sha or by `<commit>:<path>`."""
    return git(owner_repo, "cat-file", "-p", sha_or_spec)


def blob_sha(owner_repo, commit, path):
    return git(owner_repo, "rev-parse", f"{commit}:{path}").decode().strip()


def ls_tree(owner_repo, commit, path=""):
    """[(blob_sha, size, path)] under path at commit."""
    out = git(owner_repo, "ls-tree", "-r", "-l", commit, *([path] if path else []))
    rows = []
    for line in out.decode().splitlines():
        meta, p = line.split("\t", 1)
        _mode, typ, sha, size = meta.split()
        if typ == "blob":
            rows.append((sha, int(size) if size.isdigit() else None, p))
    return rows


def text_of(content, skip_empty=False):
    """A message's text: a string, or its text blocks joined by newlines (`skip_empty`: those
    with text only)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            c.get("text", "")
            for c in content
            if isinstance(c, dict) and c.get("type", "text") == "text" and (c.get("text") or not skip_empty)
        )
    return str(content)


def cut(s, n=CUT, head=None):
    """At most about n characters: the head, or (`head` given) that many of the head and the
    rest from the tail (the end of a test run is where its summary is)."""
    if s is None:
        return s
    if not isinstance(s, str):
        s = orjson.dumps(s).decode()
    if len(s) <= n:
        return s
    if head is None:
        return s[:n] + f"...[+{len(s) - n} chars]"
    mark = f"\n...[+{len(s) - n} chars]...\n"
    return s[:head] + mark + s[len(s) - (n - head - len(mark)) :]


class Writer:
    """Collects events and run records of one source and writes them at close()."""

    def __init__(self, source):
        self.source = source
        self.lines = []
        self.runs = []
        self.sessions = set()
        self.files = []  # (repo, commit, path, blob, note)

    def used(self, repo, commit, path, sha, note=""):
        self.files.append({"repo": repo, "commit": commit, "path": path, "blob": sha, "note": note})

    def session(self, sid):
        if sid in self.sessions:
            raise ValueError(f"duplicate session {sid}")
        self.sessions.add(sid)
        return Session(self, sid)

    def close(self):
        os.makedirs(EVAL, exist_ok=True)
        path = os.path.join(EVAL, f"{self.source}.jsonl.gz")
        with gzip.GzipFile(path, "wb", mtime=0, compresslevel=9) as f:
            for ev in self.lines:
                f.write(orjson.dumps(ev) + b"\n")
        with open(os.path.join(EVAL, f"{self.source}.runs.jsonl"), "wb") as f:
            for r in self.runs:
                f.write(orjson.dumps(r) + b"\n")
        with open(os.path.join(EVAL, f"{self.source}.files.jsonl"), "wb") as f:
            for r in self.files:
                f.write(orjson.dumps(r) + b"\n")
        n_ev = len(self.lines)
        print(
            f"{self.source}: {len(self.runs)} runs, {n_ev} events, {os.path.getsize(path) / 1e6:.2f} MB -> {path}",
            file=sys.stderr,
        )


class Session:
    def __init__(self, w, sid):
        self.w = w
        self.sid = sid
        self.n = 0
        self.calls = 0
        self.start = len(w.lines)

    def _emit(self, ev):
        ev = {"session": self.sid, **{k: v for k, v in ev.items() if v is not None}}
        self.w.lines.append(ev)
        self.n += 1
        return ev

    def user(self, text, **kw):
        return self._emit({"type": "user", "text": cut(text), **kw})

    def assistant(self, text, **kw):
        return self._emit({"type": "assistant", "text": cut(text), **kw})

    def final(self, text, **kw):
        return self._emit({"type": "final", "text": cut(text), **kw})

    def call(self, tool, args, call_id=None, thought=None, **kw):
        self.calls += 1
        if not call_id:  # absent or empty upstream id: a fresh one of our own
            call_id = f"c{self.calls}"
        if isinstance(args, dict):
            args = {k: (cut(v, 4000) if isinstance(v, str) else v) for k, v in args.items()}
        return self._emit(
            {
                "type": "tool_call",
                "tool": tool,
                "args": args,
                "call_id": call_id,
                "thought": cut(thought) if thought else None,
                **kw,
            }
        )

    def result(self, tool, call_id, ok, output=None, error=None, **kw):
        ev = {"type": "tool_result", "tool": tool, "call_id": call_id, "ok": bool(ok), **kw}
        if ok:
            ev["result"] = {"output": cut(output if output is not None else "")}
        else:
            ev["error"] = cut(error if error is not None else (output or ""))
            if output is not None and error is not None:
                ev["result"] = {"output": cut(output)}
        return self._emit(ev)

    def last_call_id(self):
        return f"c{self.calls}"

    def done(self, success, **info):
        """Record the run's outcome (success: True/False/None when the source records none)."""
        self.w.runs.append(
            {"session": self.sid, "source": self.w.source, "success": success, "events": self.n, "tool_calls": self.calls, **info}
        )

    def drop(self):
        del self.w.lines[self.start :]
        self.w.sessions.discard(self.sid)


_STEP = _re.compile(r"^(Thought|Action|Observation) (\d+):[ \t]?", _re.M)
_ACT = _re.compile(r"^(\w+)\[(.*)\]$", _re.S)


def react_steps(text):
    """Split a printed ReAct scratchpad ("Thought n: / Action n: / Observation n:") into
    (prefix, [{"n", "thought", "action", "observation"}])."""
    marks = list(_STEP.finditer(text))
    prefix = text[: marks[0].start()] if marks else text
    steps = {}
    order = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        kind, n = m.group(1).lower(), int(m.group(2))
        if n not in steps:
            steps[n] = {"n": n}
            order.append(n)
        steps[n][kind] = text[m.end() : end].rstrip("\n")
    return prefix, [steps[n] for n in order]


def react_emit(s, step, invalid_prefixes=("Invalid action", "Invalid Action"), error_obs=()):
    """Emit one ReAct step. Finish[...] accepted by the environment becomes a `final` event;
    an action the environment rejected becomes tool `invalid` with ok=false."""
    act_raw = step.get("action")
    obs = step.get("observation")
    thought = (step.get("thought") or "").strip() or None
    if act_raw is None:
        if thought:
            s.assistant(thought)
        return None
    act = act_raw.strip()
    rejected = obs is not None and obs.strip().startswith(invalid_prefixes)
    m = _ACT.match(act)
    if m and not rejected and act_raw[:1] not in "\n":
        tool, arg = m.group(1).lower(), m.group(2)
    else:
        tool, arg = "invalid", act
        rejected = True if obs is not None else rejected
    if tool == "finish":
        if thought:
            s.assistant(thought)
        s.final(arg)
        return "finish"
    c = s.call(tool, {"arg": arg}, thought=thought)
    if obs is None:
        return tool
    o = obs.strip()
    bad = rejected or any(o.startswith(p) for p in error_obs)
    s.result(tool, c["call_id"], not bad, output=o)
    return tool
