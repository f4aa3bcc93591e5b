"""done_claim: a coding agent's last message held to what its tools did (agent_breaker/_work.py),
through the engine and the hooks of the three agents."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_breaker import Engine
from agent_breaker import heuristics as H
from agent_breaker._work import BUILD, CHANGED, COMMIT, LINT, PUSH, RAN, TEST, TYPECHECK, Commands, Work, claims, reading
from agent_breaker.clock import FakeClock
from agent_breaker.dispatch import verdict_event
from agent_breaker.hooks import CLAUDE_CODE, CODEX, GEMINI_CLI, answer, read


def _hash(text: str) -> int:
    return hash(text) & 0xFFFFFFFF


def kinds_of(command: str, commands: Commands | None = None) -> list[tuple[str, ...]]:
    did = (commands or Commands()).did("bash", {"command": command}, _hash)
    return [] if did is None else [run.kinds for run in did.runs if run.kinds]


# ----------------------------------------------------------------------------- commands
@pytest.mark.parametrize(
    ("command", "kinds"),
    [
        ("pytest -q", [(TEST,)]),
        ("cd /repo && python -m pytest tests/ 2>&1 | tail -20", [(TEST,)]),
        ("uv run pytest -x", [(TEST,)]),
        ("CI=1 npm test", [(TEST,)]),
        ("pnpm run test:unit", [(TEST,)]),
        ("yarn build", [(BUILD,)]),
        ("cargo test --workspace", [(TEST,)]),
        ("go test ./...", [(TEST,)]),
        ("make test", [(TEST,)]),
        ("make", [(BUILD,)]),
        ("./gradlew test", [(TEST,)]),
        ("mvn -q verify", [(TEST, BUILD)]),
        ("npx tsc --noEmit", [(BUILD, TYPECHECK)]),
        ("mypy src", [(TYPECHECK,)]),
        ("ruff check .", [(LINT,)]),
        ("python tests/runtests.py auth", [(TEST,)]),
        ("python test_edge_cases.py", [(TEST,)]),
        ("./run_tests.sh", [(TEST,)]),
        ("git -C repo commit -am 'fix'", [(COMMIT,)]),
        ("git push -u origin feature", [(PUSH,)]),
        ("ls -la && cat setup.py", []),
        ("python reproduce.py", []),
        ('python -c "print(1 > 0)"', []),
    ],
)
def test_the_common_tools_commands_are_told_apart(command, kinds):
    assert kinds_of(command) == kinds


def test_a_config_names_its_own_commands():
    commands = Commands({TEST: [r"^bin/check-all\b"], PUSH: [r"^deploy-branch\b"]})
    assert kinds_of("bin/check-all --fast", commands) == [(TEST,)]
    assert kinds_of("deploy-branch main", commands) == [(PUSH,)]


def test_edits_are_read_from_edit_tools_patches_and_shell_writes():
    c = Commands()
    assert c.did("edit", {"file_path": "/w/src/app.ts", "old_string": "a", "new_string": "b"}, _hash).edits == ("/w/src/app.ts",)
    assert c.did("write_file", {"file_path": "a.py", "content": "x"}, _hash).edits == ("a.py",)
    patch = "*** Begin Patch\n*** Update File: src/a.py\n@@\n-x\n+y\n*** Add File: src/b.py\n+z\n*** End Patch"
    assert c.did("apply_patch", {"input": patch}, _hash).edits == ("src/b.py",)  # the last: what a reason names
    assert c.did("str_replace_editor", {"command": "view", "path": "/a.py"}, _hash) is None
    assert c.did("bash", {"command": "sed -i 's/a/b/' src/app.py"}, _hash).edits == ("src/app.py",)
    heredoc = "cat > fix.py << 'EOF'\nimport os\npytest is not run here\nEOF\npython fix.py"
    did = c.did("bash", {"command": heredoc}, _hash)
    assert did.edits == ("fix.py",) and [r.shown for r in did.runs] == ["python fix.py"]
    # quoted text redirects nothing; a scratch file deleted is no edit
    assert c.did("bash", {"command": "python -c 'print(1 > 2)'"}, _hash).edits == ()
    assert c.did("bash", {"command": "python x.py > /tmp/out.txt 2>&1 > log.md"}, _hash).edits == ()  # no code
    assert c.did("bash", {"command": "rm test_scratch.py"}, _hash).edits == ()
    assert c.did("task", {"prompt": "fix it"}, _hash).delegates


@pytest.mark.parametrize(
    ("output", "failed", "no_tests", "summary"),
    [
        ("..F\n===== 1 failed, 2 passed in 0.12s =====", True, False, "1 failed, 2 passed"),
        ("...\n3 passed in 0.05s\n", False, False, "3 passed"),
        ("no tests ran in 0.01s", False, True, ""),
        ("Ran 4 tests in 0.1s\n\nFAILED (failures=1)", True, False, "Ran 4 tests in 0.1s FAILED (failures=1)"),
        ("Ran 4 tests in 0.1s\n\nOK", False, False, "Ran 4 tests in 0.1s OK"),
        ("Tests:       3 failed, 7 passed, 10 total", True, False, "Tests: 3 failed, 7 passed, 10 total"),
        ("test result: FAILED. 3 passed; 1 failed; 0 ignored", True, False, "test result: FAILED. 3 passed; 1 failed; 0 ignored"),
        ("--- FAIL: TestParse (0.00s)\nFAIL\tpkg\t0.01s", True, False, "FAIL"),
        ("src/a.ts(3,1): error TS2304: Cannot find name 'x'.\nFound 1 error.", True, False, "Found 1 error"),
        ("Found 0 errors. Watching for file changes.", False, False, ""),
        ("Success: no issues found in 12 source files", False, False, "Success: no issues found in 12 source files"),
        ("Finished in 0.3 seconds\n10 examples, 0 failures", False, False, "10 examples, 0 failures"),
        ("  10 passing (12ms)", False, False, "10 passing (12ms)"),
    ],
)
def test_a_commands_output_is_read_whatever_its_exit_status(output, failed, no_tests, summary):
    assert reading({"stdout": output}) == type(reading(""))(failed, no_tests, summary)


# ----------------------------------------------------------------------------- claims
@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("All tests pass now.", [TEST]),
        ("Fixed the parser; the full test suite is green.", [TEST]),
        ("✅ All existing tests pass - no regressions", [TEST]),
        ("The build succeeds and mypy reports no errors.", [BUILD, TYPECHECK]),
        ("Lint is clean.", [LINT]),
        ("I committed the changes and pushed them to origin/main.", [COMMIT, PUSH]),
        ("I updated `src/app.ts` to handle empty input.", [CHANGED]),
        ("I ran `make lint` before finishing.", [RAN]),
        # a plan, a hedge, a question, a failure report: no claim
        ("Next, I will run the tests to make sure they pass.", []),
        ("The tests should pass once the fixture is fixed.", []),
        ("Do all tests pass?", []),
        ("2 tests still fail: test_a and test_b.", []),
        ("Not all tests pass yet.", []),
        ("The build failed with 3 errors.", []),
        ("All tests pass except test_io, which was already failing.", []),
        ("The core tests pass.\nThe failures in `make test` are from other parts of the codebase.", []),
        ("I looked at src/app.ts and found the bug.", []),
        ("```\n5 passed in 0.1s\n```", []),
        ("Node.js 20 was added to the matrix.", []),
        # what the sentence names besides the agent's own act; a checklist's open item; a noun
        ("I updated `README.md` to reflect that `scripts/run.py` is the entry point.", [CHANGED]),
        ("- [ ] Main ETL test passes", []),
        ("Extended the table with 7 fields: architect, grass types, green size.", []),
        ("The integration tests run `sls offline` against serverless v3.", []),
        ("See the work through to a pushed, green PR.", []),
        ("Improve while keeping tests green.", []),
    ],
)
def test_claims_are_read_and_plans_questions_and_failures_are_not(text, kinds):
    assert sorted(c.kind for c in claims(text)) == sorted(kinds)


# ----------------------------------------------------------------------------- the engine
@pytest.fixture
def engine():
    return Engine({"modes": {"unverified_claim": "off"}}, clock=FakeClock())


class Session:
    def __init__(self, engine: Engine, sid: str = "s1") -> None:
        self.engine, self.sid, self.n = engine, sid, 0

    def run(self, tool: str, args: dict, ok: bool = True, result: object = "ok", error: str | None = None) -> None:
        self.n += 1
        cid = f"c{self.n}"
        assert self.engine.process({"session": self.sid, "type": "tool_call", "tool": tool, "args": args, "call_id": cid}).allowed
        self.engine.process(
            {"session": self.sid, "type": "tool_result", "tool": tool, "ok": ok, "result": result, "error": error, "call_id": cid}
        )

    def shell(self, command: str, output: str = "", status: int = 0) -> None:
        if status:
            self.run("Bash", {"command": command}, False, None, f"Exit code {status}\n{output}")
        else:
            self.run("Bash", {"command": command}, True, {"stdout": output, "stderr": ""})

    def edit(self, path: str) -> None:
        self.run("Edit", {"file_path": path, "old_string": "a", "new_string": "b"})

    def stop(self, text: str, continued: bool | None = None):
        return self.engine.process({"session": self.sid, "type": "final", "text": text, "continued": continued})

    def user(self, text: str):
        return self.engine.process({"session": self.sid, "type": "user", "text": text})


def test_a_false_tests_pass_is_refused_with_the_evidence(engine):
    s = Session(engine)
    s.edit("src/app.py")
    s.shell("python -m pytest -q", "F..\n1 failed, 2 passed in 0.1s", status=1)
    v = s.stop("I fixed the bug. All tests pass now.")
    assert not v.allowed and v.heuristic == H.DONE_CLAIM
    assert "the last `pytest -q`, after your last edit of src/app.py, exited 1: 1 failed, 2 passed" in v.reason
    assert s.stop("The fix is in, but the test still fails: 1 failed, 2 passed.").allowed  # the truth stops


def test_failures_said_to_be_fixed_are_no_report_of_failures(engine):
    s = Session(engine)
    s.edit("src/app.py")
    s.shell("pytest -q", "1 failed, 2 passed in 0.1s", status=1)
    v = s.stop("I fixed the failing test. All tests pass now.")
    assert not v.allowed and "exited 1: 1 failed, 2 passed" in v.reason


def test_a_piped_run_that_exits_0_is_read_by_its_summary(engine):
    s = Session(engine)
    s.edit("src/app.py")
    s.shell("pytest | tail -3", "==== 2 failed, 5 passed in 1.0s ====")
    v = s.stop("All tests passed.")
    assert (
        not v.allowed
        and "`pytest`, after your last edit of src/app.py, exited 0, but its output says 2 failed, 5 passed" in v.reason
    )


def test_a_true_tests_pass_stops_at_once(engine):
    s = Session(engine)
    s.edit("src/app.py")
    s.shell("pytest -q", "1 failed in 0.1s", status=1)
    s.edit("src/app.py")
    s.shell("pytest -q", "3 passed in 0.1s")
    assert s.stop("All tests pass now.").allowed


def test_an_edit_after_the_last_passing_run_makes_it_stale_but_a_doc_edit_does_not(engine):
    s = Session(engine)
    s.shell("pytest -q", "3 passed in 0.1s")
    s.edit("README.md")
    assert s.stop("All tests pass.").allowed
    s.edit("src/app.py")
    v = s.stop("All tests pass.")
    assert not v.allowed and "your last edit of src/app.py came after the last test run" in v.reason


def test_no_test_run_at_all_is_no_evidence_but_a_program_run_after_the_edit_may_be_the_test(engine):
    s = Session(engine)
    s.edit("src/app.py")
    assert "no test command ran in this session" in s.stop("All tests pass.").reason
    s.shell("python reproduce.py", "works")
    assert s.stop("All tests pass.", continued=False).allowed


def test_a_run_of_no_tests_backs_no_tests_pass(engine):
    s = Session(engine)
    s.shell("pytest -k nothing", "no tests ran in 0.01s", status=5)
    assert not s.stop("All tests pass.").allowed


def test_commit_and_push_need_their_commands_to_have_succeeded(engine):
    s = Session(engine)
    s.shell("git commit -am fix", "nothing to commit, working tree clean", status=1)
    v = s.stop("I committed the fix.")
    assert not v.allowed and "`git commit -am fix` exited 1" in v.reason
    s.shell("git commit -am fix2", "[main 1a2b3c4] fix2")
    v = s.stop("I committed the fix and pushed it to origin.", continued=False)
    assert not v.allowed and "no `git push` ran in this session" in v.reason
    s.shell("git push origin main", "To github.com:x/y.git")
    assert s.stop("I committed the fix and pushed it to origin.", continued=False).allowed


def test_a_file_claimed_changed_must_be_one_a_tool_touched(engine):
    s = Session(engine)
    s.edit("/repo/src/app.ts")
    assert s.stop("I updated `src/app.ts`.").allowed
    v = s.stop("I updated `src/app.ts` and added tests in `tests/app.test.ts`.", continued=False)
    assert not v.allowed and "app.test.ts" in v.reason and "app.ts`" not in v.reason.split("but")[1]


def test_a_file_a_program_may_have_written_and_the_index_alone_are_no_evidence_against(engine):
    s = Session(engine)
    s.shell("bun install", "Saved lockfile")
    assert s.stop("I created `bun.lock` and updated nothing else.").allowed  # bun wrote it, unnamed
    s.shell("bun run build", "Compiled successfully")
    s.shell("git restore --staged logs/x.json")  # unstaged: the files stay as they are
    assert s.stop("The build completed successfully.", continued=False).allowed
    s.shell("git checkout -- src/app.ts")
    assert not s.stop("The build completed successfully.", continued=False).allowed


def test_a_run_that_goes_on_in_the_background_is_judged_when_its_end_is_read(engine):
    s = Session(engine)
    s.edit("src/app.py")
    # Codex hands back a command still running after 10 s; its end comes with a poll
    s.run(
        "exec_command",
        {"cmd": "pytest -q"},
        True,
        "Chunk ID: 1\nWall time: 10.0 seconds\nProcess running with session ID 42\nOutput:\n..F",
    )
    assert s.stop("All tests pass.").allowed  # not ended yet: the record cannot tell
    s.run(
        "write_stdin", {"session_id": 42, "chars": ""}, True, "Process exited with code 1\nOutput:\n1 failed, 2 passed in 12.0s"
    )
    v = s.stop("All tests pass.", continued=False)
    assert not v.allowed and "the last `pytest -q`, after your last edit of src/app.py, exited 1: 1 failed, 2 passed" in v.reason
    # Claude Code's background shell, read with BashOutput
    s.run(
        "Bash",
        {"command": "npm test", "run_in_background": True},
        True,
        {"stdout": "Command running in background with ID: bash_1"},
    )
    s.run(
        "BashOutput",
        {"bash_id": "bash_1"},
        True,
        "<status>completed</status>\n<exit_code>0</exit_code>\n<stdout>Tests: 3 passed, 3 total</stdout>",
    )
    assert s.stop("All tests pass.", continued=False).allowed


def test_a_subagents_work_makes_the_record_unable_to_tell(engine):
    s = Session(engine)
    s.edit("src/app.py")
    s.shell("pytest -q", "1 failed in 0.1s", status=1)
    s.run("Task", {"prompt": "fix the failing test"})
    assert s.stop("All tests pass now.").allowed


def test_refusals_are_bounded_per_turn_then_the_claim_is_let_through_and_recorded(engine):
    s = Session(engine)
    s.edit("src/app.py")
    s.shell("pytest", "1 failed in 0.1s", status=1)
    said = [s.stop("All tests pass.", continued=i > 0) for i in range(4)]
    assert [v.allowed for v in said] == [False, False, True, True]
    assert said[2].heuristic == H.DONE_CLAIM and said[2].severity == "warn" and "let through" in said[2].reason
    # the user's next turn: refused again; the agent's own flag that a turn is new too
    s.user("please look at test_parse again")
    assert not s.stop("All tests pass.").allowed
    assert not s.stop("All tests pass.", continued=False).allowed


def test_a_refusal_sent_back_as_a_prompt_is_not_the_users_turn(engine):
    s = Session(engine)
    s.shell("pytest", "1 failed in 0.1s", status=1)
    first = s.stop("All tests pass.")
    s.user(f"agent-breaker (done_claim): {first.reason}")  # Gemini CLI's way to continue a stop
    assert not s.stop("All tests pass.", continued=True).allowed
    assert s.stop("All tests pass.", continued=True).allowed  # the third: let through


def test_a_message_that_repeats_the_refused_one_is_read_for_what_it_adds(engine):
    # Gemini CLI's prompt_response: all the model's text for the prompt, the refused answer too
    s = Session(engine)
    s.shell("pytest", "1 failed in 0.1s", status=1)
    assert not s.stop("All tests pass now.").allowed
    v = s.stop("All tests pass now.\nThe test still fails: 1 failed.", continued=True)
    assert v.allowed and v.heuristic is None
    assert not s.stop("Sorry.\nAll tests pass now.", continued=True).allowed  # not an extension of it


def test_observe_mode_reports_and_lets_the_stop_through():
    engine = Engine({"modes": {"unverified_claim": "off", "done_claim": "observe"}}, clock=FakeClock())
    s = Session(engine)
    s.shell("pytest", "1 failed in 0.1s", status=1)
    v = s.stop("All tests pass.")
    assert v.allowed and v.heuristic == H.DONE_CLAIM


@pytest.mark.parametrize("store_kind", ["sqlite", "redis"])
def test_the_record_is_shared_through_a_store(shared_store):
    # what one hook process recorded, another decides on (the command path), on SQLite and Redis
    config = {"modes": {"unverified_claim": "off"}}
    s = Session(Engine(config, store=shared_store, clock=FakeClock()))
    s.edit("src/app.py")
    s.shell("pytest -q", "1 failed in 0.1s", status=1)
    other = Session(Engine(config, store=shared_store, clock=FakeClock()))
    v = other.stop("All tests pass.")
    assert not v.allowed and "the last `pytest -q`, after your last edit of src/app.py, exited 1: 1 failed" in v.reason


def test_work_wire_round_trip():
    w = Work()
    from agent_breaker._work import Did, Run

    # every part set, so that one the wire form leaves out fails the comparison
    w.await_call("c1", Did((Run((TEST,), "pytest", True),), ("a.py",), (1, 2), (3,), False))
    w.record("c1", False, None, reading("Process running with session ID 7"))
    w.await_call("c2", Did(edits=("b.py",), names=(4,), polls="7"))
    w.await_call("c3", Did(delegates=True))
    w.refused, w.said, w.generated = 1, (12, 34), True
    back = Work.from_wire(json.loads(json.dumps(w.to_wire())))
    assert back == w and back.running == {"7": [TEST]} and back.runs[TEST].running


# a session's stops, the user's turns and the agent's flag in any order: never more refusals in a
# turn than the cap
@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["stop", "stop_continued", "stop_new", "user", "pass", "fail"]), max_size=30), st.integers(0, 3))
def test_refusals_never_exceed_the_cap_in_a_turn(steps, cap):
    # the loop heuristics off: a run of failing test commands is not what this test is about
    modes = dict.fromkeys([*H.LOOPS, H.CIRCUIT_OPEN, H.UNVERIFIED_CLAIM, H.SESSION_CHURN], "off")
    engine = Engine({"modes": modes, "done_claim": {"max_refusals_per_turn": cap}}, clock=FakeClock())
    s = Session(engine)
    refused_this_turn = 0
    for step in steps:
        if step == "user":
            s.user(f"news {s.n}")
            refused_this_turn = 0
        elif step in ("pass", "fail"):
            outcome = ("1 passed in 0.1s", 0) if step == "pass" else ("1 failed in 0.1s", 1)
            s.shell(f"pytest -q tests/t{s.n}.py", outcome[0], status=outcome[1])  # distinct: no loop
        else:
            continued = {"stop": None, "stop_continued": True, "stop_new": False}[step]
            if continued is False:
                refused_this_turn = 0
            v = s.stop("All tests pass.", continued=continued)
            refused_this_turn += not v.allowed
            assert refused_this_turn <= cap


# ----------------------------------------------------------------------------- the hooks
STOPS = {
    CLAUDE_CODE: {"hook_event_name": "Stop", "last_assistant_message": "All tests pass now."},
    CODEX: {"hook_event_name": "Stop", "turn_id": "t1", "last_assistant_message": "All tests pass now."},
    GEMINI_CLI: {"hook_event_name": "AfterAgent", "prompt": "fix it", "prompt_response": "All tests pass now."},
}


@pytest.mark.parametrize("agent", [CLAUDE_CODE, CODEX, GEMINI_CLI])
def test_each_agents_end_of_turn_reaches_the_guard_and_a_refusal_continues_it(agent, engine):
    s = Session(engine, "hs")
    s.shell("pytest", "1 failed in 0.1s", status=1)
    hook = read(agent, json.dumps({**STOPS[agent], "session_id": "hs", "stop_hook_active": False}).encode(), fail_closed=False)
    said = answer(hook, verdict_event(engine, hook.event))
    assert said.denied
    code, stderr, stdout = said.printed()
    if agent == GEMINI_CLI:
        assert code == 0 and json.loads(stdout)["decision"] == "deny"
        assert json.loads(stdout)["reason"].startswith("agent-breaker (done_claim): ")
    else:
        assert code == 2 and stderr.startswith("agent-breaker (done_claim): ") and "exited 1" in stderr


@pytest.mark.parametrize("agent", [CLAUDE_CODE, CODEX, GEMINI_CLI])
def test_a_stop_without_a_message_or_a_claim_is_let_through(agent, engine):
    empty = {k: v for k, v in STOPS[agent].items() if k not in ("last_assistant_message", "prompt_response")}
    assert read(agent, json.dumps({**empty, "session_id": "x"}).encode(), fail_closed=True).printed()[0] == 0
    hook = read(
        agent,
        json.dumps(
            {
                **STOPS[agent],
                "session_id": "x",
                "last_assistant_message": "Here is my plan.",
                "prompt_response": "Here is my plan.",
            }
        ).encode(),
        fail_closed=False,
    )
    assert not answer(hook, verdict_event(engine, hook.event)).denied


def test_a_subagents_stop_is_its_own_sessions():
    hook = read(
        CLAUDE_CODE,
        json.dumps(
            {
                "hook_event_name": "SubagentStop",
                "session_id": "p",
                "agent_id": "a1",
                "last_assistant_message": "done",
                "stop_hook_active": True,
            }
        ).encode(),
        fail_closed=False,
    )
    assert hook.event["session_id"] == "p/a1" and hook.event["continued"] is True


def test_a_claim_let_through_tells_the_user(engine):
    s = Session(engine, "hs")
    s.shell("pytest", "1 failed in 0.1s", status=1)
    for active in (False, True, True):
        hook = read(
            CLAUDE_CODE,
            json.dumps({**STOPS[CLAUDE_CODE], "session_id": "hs", "stop_hook_active": active}).encode(),
            fail_closed=False,
        )
        said = answer(hook, verdict_event(engine, hook.event))
    assert not said.denied and said.output["systemMessage"].startswith("agent-breaker (done_claim): ")
