"""done_claim: what a coding agent's tools did, and whether its last message claims more.

Three readings, all pure:
- `Commands.did(tool, args)`: what one call does, from its tool's name and arguments: the
  commands it runs (a test run, a build, a type check, a lint, a commit, a push, a program), the
  files it edits, or a subagent it starts;
- `reading(result)`: what a command's output says of its run (a test summary: "3 failed, 10
  passed"; whether tests ran at all), whatever its exit status says (`pytest | tail` exits 0);
- `claims(text)`: the claims of work done in an agent's last message ("all tests pass", "the
  build succeeds", "I committed and pushed", "I updated src/app.ts", "I ran `make lint`").
  A plan, a question, a hedge and a report of failure claim nothing.

`check(claims, work, hashed)` holds the claims to the session's record (`_state.Work`) and gives
the refusal's reason, quoting the evidence, or None. A claim is refused only on evidence against
it or on none at all; where the record cannot tell (a subagent did part of the work, a program
that may be a test ran after the last edit), it passes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ._text import reported_exit

TEST, BUILD, TYPECHECK, LINT, COMMIT, PUSH = "test", "build", "typecheck", "lint", "commit", "push"
#: what a command may be, in the order a reason names them
KINDS = (TEST, BUILD, TYPECHECK, LINT, COMMIT, PUSH)
#: claims: each kind of command said to have passed, plus these
CHANGED, RAN, TESTS_RAN = "changed", "ran", "tests_ran"

MAX_SHOWN = 120  # characters of a command a reason quotes
MAX_CALL_RUNS = 8  # commands of one shell line followed (and their heads)
MAX_CALL_NAMES = 64  # files one call names, kept as keyed hashes
MAX_PATH = 160
MAX_SUMMARY = 100
MAX_READ = 8_000  # of a command's output: its head and its tail (summaries come last)
MAX_MESSAGE = 20_000  # characters of a last message read for claims: its head and its tail
MAX_LINE = 8_000  # characters of a shell line read for its commands (tokenizing costs ~1 µs each)
MAX_LINE_COMMANDS = 64  # commands of a shell line read

# tools, by their normalized names
_SHELLS = frozenset(
    {
        "bash",
        "shell",
        "sh",
        "zsh",
        "execute_bash",
        "run_shell_command",
        "exec_command",
        "local_shell",
        "terminal",
        "run_terminal_cmd",
        "run_command",
        "execute_command",
        "container.exec",
        "bash_tool",
        "cmd",
        "powershell",
    }
)
_EDITORS = frozenset(
    {
        "edit",
        "multiedit",
        "write",
        "notebookedit",
        "write_file",
        "replace",
        "edit_file",
        "create_file",
        "str_replace_editor",
        "str_replace_based_edit_tool",
        "apply_patch",
        "insert",
        "append",
    }
)
_DELEGATES = frozenset(
    {"task", "agent", "spawn_agent", "delegate", "delegate_to_agent", "subagent", "dispatch_agent", "run_subagent"}
)
# what reads a command running in the background, and the argument naming it
_POLLS = frozenset({"write_stdin", "bashoutput", "taskoutput", "read_background_output"})
_PROCESS_KEYS = ("session_id", "bash_id", "shell_id", "task_id")
# str_replace_editor's commands that only read
_VIEWS = frozenset({"view", "read"})
_COMMAND_KEYS = ("command", "cmd", "script", "commands")
_PATH_KEYS = ("file_path", "path", "notebook_path", "filename", "file", "target_file")
_PATCH_PATH = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$|^\+\+\+ (?:b/)?(\S+)", re.MULTILINE)

# what runs a command under another: skipped to find the program
_WRAPPERS = frozenset({"sudo", "time", "env", "nohup", "nice", "exec", "command", "builtin", "xargs", "stdbuf", "unbuffer"})
_RUNNERS = {
    ("uv", "run"),
    ("poetry", "run"),
    ("pipenv", "run"),
    ("bundle", "exec"),
    ("pdm", "run"),
    ("hatch", "run"),
    ("rye", "run"),
}
_INTERPRETERS = frozenset(
    {"python", "python3", "python2", "py", "node", "deno", "bun", "ruby", "perl", "php", "bash", "sh", "zsh", "java", "dotnet"}
)
_PACKAGE_MANAGERS = frozenset({"npm", "pnpm", "yarn", "bun"})
_TEST_PROGRAMS = frozenset(
    {
        "pytest",
        "py.test",
        "tox",
        "nox",
        "jest",
        "vitest",
        "mocha",
        "ava",
        "karma",
        "phpunit",
        "rspec",
        "ctest",
        "unittest",
        "nosetests",
        "nose2",
        "bats",
        "behave",
        "trial",
        "playwright",
        "cypress",
        "runtests",
    }
)
_TEST_SUBCOMMANDS = frozenset(
    {
        "cargo",
        "go",
        "deno",
        "bun",
        "dotnet",
        "mix",
        "swift",
        "zig",
        "flutter",
        "dart",
        "stack",
        "cabal",
        "lein",
        "sbt",
        "bazel",
        "just",
        "task",
        "hatch",
        "rake",
        "nx",
    }
)
_TEST_TARGET = re.compile(r"^(?:test|tests|check|spec|specs|unittest|unit|e2e|integration|test[:_-]\w+)$")
_BUILD_TARGET = re.compile(r"^(?:build|all|compile|dist|package|install|assemble|release|build[:_-]\w+)$")
_TYPE_TARGET = re.compile(r"^(?:typecheck|type-check|types|tsc|check-types|typecheck[:_-]\w+|mypy|pyright)$")
_LINT_TARGET = re.compile(r"^(?:lint|linter|lint[:_-]\w+|fmt-check|format-check|style)$")
_TYPE_PROGRAMS = frozenset({"tsc", "mypy", "pyright", "pytype", "flow", "vue-tsc", "basedpyright"})
_LINT_PROGRAMS = frozenset(
    {
        "ruff",
        "eslint",
        "flake8",
        "pylint",
        "rubocop",
        "shellcheck",
        "golangci-lint",
        "stylelint",
        "biome",
        "oxlint",
        "pycodestyle",
        "pyflakes",
        "clippy",
    }
)
_BUILD_PROGRAMS = frozenset({"ninja", "webpack", "rollup", "esbuild", "vite", "next", "tsup", "msbuild", "scons", "meson"})
# a script whose name says it tests (`python test_parse.py`, `./run_tests.sh`, `node tests/all.js`)
_TEST_FILE = re.compile(r"(?:^|[/_.-])(?:tests?|spec|specs|runtests)(?:[/_.-]|$)", re.IGNORECASE)
# what only reads: a segment of these is no evidence of anything, and edits nothing
_READERS = frozenset(
    {
        "ls", "cat", "head", "tail", "less", "more", "grep", "rg", "ag", "find", "fd", "pwd", "echo", "printf", "wc", "sort",
        "uniq", "cut", "awk", "diff", "tree", "stat", "file", "which", "type", "cd", "true", "false", "sleep", "date", "whoami",
        "env", "export", "set", "source", ".", "history", "clear", "jq", "nl", "od", "xxd", "basename", "dirname", "realpath",
    }
)  # fmt: skip
# (a file deleted is no edit: tests that passed before a scratch file went pass after)
_GIT_EDITS = frozenset(
    {"apply", "checkout", "restore", "am", "cherry-pick", "merge", "rebase", "reset", "stash", "pull", "mv", "revert", "switch"}
)
_FILE_EDITS = frozenset({"mv", "cp", "touch", "truncate", "tee", "install", "ln", "unzip", "tar"})
# what a redirect writes that is code (`cat > fix.py`); `> $LOG`, `> report.json` are output
_SOURCE = re.compile(
    r"\.(?:py|pyi|js|jsx|ts|tsx|mjs|cjs|go|rs|java|kt|kts|c|h|cc|cpp|hpp|cs|rb|php|swift|scala|sh|bash|toml|ya?ml|cfg|ini|"
    r"sql|vue|svelte|ex|exs|erl|hs|ml|lua|pl|r|jl|dart|tf|gradle|proto|mk)$",
    re.IGNORECASE,
)
_DATA = re.compile(r"\.(?:toml|ya?ml|json|jsonc|ini|cfg|conf|properties|xml|csv|tsv|env)$", re.IGNORECASE)
_MANIFESTS = frozenset(
    {
        "cargo.toml", "pyproject.toml", "setup.cfg", "tox.ini", "pytest.ini", "mypy.ini", "package.json", "tsconfig.json",
        "jsconfig.json", "deno.json", "pom.xml", "go.mod", "composer.json", "pubspec.yaml", "mix.exs", "build.xml",
        "angular.json", "babel.config.json", ".babelrc", "project.json", "nx.json", "turbo.json", "pnpm-workspace.yaml",
    }
)  # fmt: skip
# files whose edit changes no code: under a hidden folder, docs, logs, devices
_HIDDEN_FOLDER = re.compile(r"(?:^|/)\.(?!\.?/)[^/]+/")
_NOT_CODE = re.compile(r"(?:\.(?:md|markdown|rst|txt|log|out|adoc|org)$|^/dev/|^/proc/)", re.IGNORECASE)
# what ends a command in a shell line, and what redirects its input or output (with its target)
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", ";;", "(", ")", "|&", ";&"})
_REDIRECTIONS = frozenset({">", ">>", ">|", "&>", "&>>", ">&", "<", "<<", "<<<", "<&", "<>", "<<-"})
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>"})
_ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# a here-document's body is data, not commands: dropped, its first line kept
_HEREDOC = re.compile(r"(<<-?\s*(['\"]?)(\w+)\2[^\n]*)\n.*?\n\s*\3[ \t]*(?=\n|$)", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Run:
    """One command of a call: its kinds (of KINDS; none for a program run that may be a test),
    how a reason quotes it, and whether it runs a program at all (a script, an interpreter)."""

    kinds: tuple[str, ...]
    shown: str
    program: bool


@dataclass(frozen=True, slots=True)
class Did:
    """What one call does: the commands it runs, the last file of code it edits ("" for one it
    cannot name; none when it edits no code), the keyed hashes of the files and command heads it
    names, and whether it starts a subagent (whose work the session's record cannot see). Made by
    `_did`, which bounds each part."""

    runs: tuple[Run, ...] = ()
    edits: tuple[str, ...] = ()
    names: tuple[int, ...] = ()
    heads: tuple[int, ...] = ()
    delegates: bool = False
    # the background process whose output it reads (Codex's write_stdin, Claude Code's BashOutput)
    polls: str = ""

    def to_wire(self) -> list[Any]:
        return [
            [[list(r.kinds), r.shown, r.program] for r in self.runs],
            list(self.edits),
            list(self.names),
            list(self.heads),
            self.delegates,
            self.polls,
        ]

    @classmethod
    def from_wire(cls, d: list[Any]) -> Did:
        runs = tuple(Run(tuple(k), shown, program) for k, shown, program in d[0])
        return cls(runs, tuple(d[1]), tuple(d[2]), tuple(d[3]), d[4], d[5])


@dataclass(frozen=True, slots=True)
class Reading:
    """What a command's output says of its run: failures counted or reported (whatever the exit
    status), whether it ran no tests, and the summary line a reason quotes ("" for none)."""

    failed: bool = False
    no_tests: bool = False
    summary: str = ""
    # the background process it runs on as (Codex hands back a command still running after
    # 10 s; Claude Code's run_in_background), and the exit status an output reports
    running: str = ""
    status: int | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """One claim of a last message: its kind (a command kind: passed; CHANGED: a file edited;
    RAN: a command run; TESTS_RAN), what it names (a file, a command; "" for none), and its
    words as written (quoted in the reason)."""

    kind: str
    subject: str
    quote: str


def runs_commands(name: str) -> bool:
    """Whether the tool `name` (normalized) runs shell commands."""
    return name in _SHELLS or name.endswith(("bash", "shell", "_command"))


def reads_output(name: str) -> bool:
    """Whether a result of the tool `name` (normalized) is a command's output: a shell's, or a
    poll's of a command running in the background."""
    return runs_commands(name) or name in _POLLS


class Commands:
    """Which commands are tests, builds, type checks, lints, commits and pushes: the common
    tools', plus a config's own patterns (`done_claim.commands`: kind -> regular expressions,
    matched against each command of a shell line, wrappers and environment assignments
    dropped)."""

    def __init__(self, extra: Mapping[str, Iterable[str]] | None = None) -> None:
        self._extra = [(kind, re.compile(p)) for kind, patterns in (extra or {}).items() for p in patterns]

    def did(self, name: str, args: Mapping[str, Any], hashed: Callable[[str], int]) -> Did | None:
        """What a call of the tool `name` (normalized, as events give it) with `args` does (None:
        it runs nothing and edits nothing); `hashed` keys the names it keeps."""
        if name in _DELEGATES:
            return Did(delegates=True)
        if name in _EDITORS:
            return _edit(name, args, hashed)
        if runs_commands(name):
            line = _command_text(args)
            return None if line is None else self._shell(line, hashed)
        if name in _POLLS:
            process = next((args[k] for k in _PROCESS_KEYS if isinstance(args.get(k), (str, int))), None)
            return None if process is None else Did(polls=str(process)[:MAX_PATH])
        return None

    def _shell(self, line: str, hashed: Callable[[str], int]) -> Did | None:
        runs: list[Run] = []
        edits: list[str] = []
        names: set[int] = set()
        heads: set[int] = set()
        commands, targets = _commands(line)
        edits += [t for t in targets if _SOURCE.search(t) and "$" not in t]
        for words in commands[:MAX_LINE_COMMANDS]:
            program, rest = _program(words)
            if program is None:
                continue
            for word in words:
                base = _basename(word)
                if base and "." in base.strip("."):
                    names.add(hashed(base.lower()))
            heads.add(hashed(_head(program, rest)))
            edited = _shell_edit(program, rest)
            edits += edited
            if program in _READERS and not edited:
                continue
            kinds = self._kinds(program, rest, words)
            runs.append(Run(kinds, _shown(program, rest), program in _INTERPRETERS or program.startswith("./") or bool(kinds)))
        return _did(runs, edits, names, heads) if runs or edits or heads else None

    def _kinds(self, program: str, rest: list[str], words: list[str]) -> tuple[str, ...]:
        found = _known_kinds(program, rest)
        if self._extra:  # a config's own commands, matched against the command as written
            segment = shlex.join(words)
            found += [kind for kind, pattern in self._extra if pattern.search(segment)]
        return tuple(k for k in KINDS if k in found)


def _known_kinds(program: str, rest: list[str]) -> list[str]:
    sub = next((w for w in rest if not w.startswith("-")), "")
    base = program.rsplit("/", 1)[-1]
    if base == "git":
        return _git_kind(rest)
    if base in _TEST_PROGRAMS or base.startswith(("pytest", "runtests")):
        return [TEST]
    if base in _TYPE_PROGRAMS:
        return [TYPECHECK, BUILD] if base in ("tsc", "vue-tsc") else [TYPECHECK]
    if base in _LINT_PROGRAMS:
        return [LINT]
    if base in _BUILD_PROGRAMS:
        return [BUILD] if base not in ("vite", "next") or sub == "build" else []
    if base in _PACKAGE_MANAGERS:
        script = rest[1] if sub == "run" and len(rest) > 1 else sub
        return _target_kinds(script) or ([TEST] if sub in ("t", "tst") else [])
    if base in ("make", "gmake", "just", "task", "invoke", "nx", "turbo"):
        targets = [w for w in rest if not w.startswith("-") and "=" not in w]
        if not targets and base in ("make", "gmake"):
            return [BUILD]
        return sorted({k for t in targets for k in _target_kinds(t)})
    if base in ("mvn", "mvnw", "gradle", "gradlew"):
        goals = {w.rsplit(":", 1)[-1] for w in rest if not w.startswith("-")}
        kinds = [TEST] if goals & {"test", "verify", "check", "integrationtest"} else []
        return kinds + ([BUILD] if goals & {"compile", "package", "install", "build", "assemble", "verify"} else [])
    if base == "cargo":
        return {"test": [TEST], "nextest": [TEST], "build": [BUILD], "check": [BUILD, TYPECHECK], "clippy": [LINT]}.get(sub, [])
    if base == "go":
        return {"test": [TEST], "build": [BUILD], "vet": [TYPECHECK]}.get(sub, [])
    if base in _TEST_SUBCOMMANDS and _TEST_TARGET.match(sub):
        return [TEST]
    if base in _TEST_SUBCOMMANDS and sub == "build":
        return [BUILD]
    if base in ("cmake",) and "--build" in rest:
        return [BUILD]
    if base in ("black", "prettier", "isort") and {"--check", "-c"} & set(rest):
        return [LINT]
    if base in _INTERPRETERS or base.startswith("python"):
        script = next((w for w in rest if not w.startswith("-")), "")
        return [TEST] if script and _TEST_FILE.search(script) else []
    if program.startswith(("./", "/")) or "/" in program:
        return [TEST] if _TEST_FILE.search(base) else []
    return []


def _target_kinds(target: str) -> list[str]:
    return [
        kind
        for kind, pattern in ((TEST, _TEST_TARGET), (BUILD, _BUILD_TARGET), (TYPECHECK, _TYPE_TARGET), (LINT, _LINT_TARGET))
        if pattern.match(target)
    ]


def _git_kind(rest: list[str]) -> list[str]:
    words = iter(rest)
    for word in words:
        if word in ("-C", "-c", "--git-dir", "--work-tree"):
            next(words, None)  # its value
            continue
        if word.startswith("-"):
            continue
        return [COMMIT] if word == "commit" else [PUSH] if word == "push" else []
    return []


def _shell_edit(program: str, rest: list[str]) -> list[str]:
    """The files a command edits ("" for one it cannot name), by its program: sed -i, a patch,
    a git command that rewrites the tree, a file moved, copied or deleted."""
    base = program.rsplit("/", 1)[-1]
    files = [w for w in rest if not w.startswith("-")]
    if base == "patch":
        return [""]  # its files are in its input
    if base in ("sed", "perl") and any(w.startswith("-i") or w == "--in-place" for w in rest):
        return [files[-1][:MAX_PATH] if files else ""]
    if base == "git":
        sub = next((w for w in rest if not w.startswith("-")), "")
        if (sub == "restore" and "--staged" in rest and not {"--worktree", "-W"} & set(rest)) or (
            sub == "reset" and "--hard" not in rest
        ):
            return []  # the index only: the files stay as they are
        return [""] if sub in _GIT_EDITS else []
    if base in _FILE_EDITS:
        # the file it writes, where it names a source file (not a folder, a variable, a log)
        return [f for f in files[-1:] if _SOURCE.search(f) and "$" not in f]
    return []


def _edit(name: str, args: Mapping[str, Any], hashed: Callable[[str], int]) -> Did | None:
    command = args.get("command")
    if name in ("str_replace_editor", "str_replace_based_edit_tool") and isinstance(command, str) and command in _VIEWS:
        return None
    paths: list[str] = []
    if name == "apply_patch":
        patch = next((v for k in ("input", "patch", "command", "content") if isinstance(v := args.get(k), str)), "")
        if isinstance(command, list):  # ["apply_patch", "<patch>"]
            patch = next((w for w in command if isinstance(w, str) and "***" in w), patch)
        paths = [next(p for p in m if p).strip() for m in _PATCH_PATH.findall(patch)]
    else:
        paths = [v for k in _PATH_KEYS if isinstance(v := args.get(k), str) and v]
        edits = args.get("edits")
        if not paths and isinstance(edits, list):
            paths = [e[k] for e in edits if isinstance(e, Mapping) for k in _PATH_KEYS if isinstance(e.get(k), str)]
    return _did([], paths or [""], {hashed(_basename(p).lower()) for p in paths if p}, set())


def _did(runs: list[Run], edits: list[str], names: set[int], heads: set[int]) -> Did:
    """A call's Did, bounded: a call in flight is kept in its session until its result."""
    code = [p for p in edits if is_code(p)]
    return Did(
        tuple(runs[:MAX_CALL_RUNS]),
        tuple(p[:MAX_PATH] for p in code[-1:]),
        tuple(sorted(names)[:MAX_CALL_NAMES]),
        tuple(sorted(heads)[:MAX_CALL_RUNS]),
    )


def _command_text(args: Mapping[str, Any]) -> str | None:
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str) and value.strip():
            return value
        if isinstance(value, list) and value and all(isinstance(w, str) for w in value):
            # ["bash", "-lc", "<line>"]: the line; else the words joined
            if len(value) >= 3 and value[-2] in ("-c", "-lc", "-ic", "/c"):
                return str(value[-1])
            return shlex.join(value)
    return None


def _commands(line: str) -> tuple[list[list[str]], list[str]]:
    """The commands of a shell line, each as its words (redirections dropped), and the files it
    writes by redirection. Quoted text stays one word (`python -c "print(a > b)"` redirects
    nothing); a here-document's body is dropped."""
    # here-documents dropped first (a file's body may be most of the line), then the rest cut
    text = _HEREDOC.sub(r"\1", line[: 8 * MAX_LINE])[:MAX_LINE].replace("\n", " ; ")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unclosed quote: the words as typed
        tokens = text.split()
    commands: list[list[str]] = []
    targets: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in _SEPARATORS:
            if current:
                commands.append(current)
            current = []
        elif token in _REDIRECTIONS:
            if current and current[-1].isdigit():
                current.pop()  # the descriptor of `2>`
            target = tokens[i + 1] if i + 1 < len(tokens) else ""
            if token in _WRITES and target and not target.isdigit() and target not in _SEPARATORS:
                targets.append(target)
            i += 1  # the target is no word of the command
        else:
            current.append(token)
        i += 1
    if current:
        commands.append(current)
    return commands, targets


def _program(words: list[str]) -> tuple[str | None, list[str]]:
    """The program a command runs and its arguments: environment assignments, wrappers
    (sudo, time, timeout N, npx, uv run...) and `python -m` dropped."""
    i = 0
    while i < len(words):
        word = words[i]
        if _ENV_ASSIGNMENT.match(word) or word in _WRAPPERS:
            i += 1
        elif word == "timeout":
            i += 2 if i + 1 < len(words) and words[i + 1][:1].isdigit() else 1
        elif word in ("npx", "pnpx", "bunx") or (word == "pnpm" and i + 1 < len(words) and words[i + 1] == "exec"):
            i += 2 if word == "pnpm" else 1
        elif i + 1 < len(words) and (word, words[i + 1]) in _RUNNERS:
            i += 2
        else:
            break
    if i >= len(words):
        return None, []
    program, rest = words[i], words[i + 1 :]
    if (program.rsplit("/", 1)[-1].startswith("python")) and len(rest) >= 2 and rest[0] == "-m":
        return rest[1], rest[2:]
    return program, rest


def _head(program: str, rest: list[str]) -> str:
    """A command's head, as a claim names it: its program and first word that is no option."""
    words = [w for w in rest if not w.startswith("-")]
    base = program.rsplit("/", 1)[-1]
    if base in _PACKAGE_MANAGERS and words[:1] == ["run"]:
        words = words[1:]  # `npm run test` is `npm test`
    return f"{base} {words[0] if words else ''}".strip().lower()


def _shown(program: str, rest: list[str]) -> str:
    text = shlex.join([program, *rest])
    return text if len(text) <= MAX_SHOWN else text[: MAX_SHOWN - 3] + "..."


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1].strip("`'\",:;()[]{}<>")


def is_code(path: str) -> bool:
    """Whether an edit of `path` changes code (a doc, a log, a scratch file, a file under a
    hidden folder, such as a tool's own settings or CI's, changes none; an edit whose file is
    unknown may)."""
    if _NOT_CODE.search(path) or _HIDDEN_FOLDER.search(path):
        return False
    # a data or settings file changes no code, unless a build reads it (Cargo.toml, package.json)
    return not _DATA.search(path) or _basename(path).lower() in _MANIFESTS


# ----------------------------------------------------------------------------- outputs
_PYTEST_COUNTS = re.compile(
    r"(?m)^[=\s]*((?:\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|deselected|warnings?|rerun)(?:, )?)+) in [\d.]+\s?s"
)
_COUNT = re.compile(r"(\d+) (failed|passed|errors?|failures?|failing|passing|pending|skipped)")
_SUMMARIES = (
    # unittest, Django: "Ran 12 tests in 0.3s" .. "FAILED (failures=1)" / "OK"
    re.compile(r"(?m)^Ran (\d+) tests? in [\d.]+s\s*\n+\s*(OK|FAILED[^\n]*)"),
    # jest / vitest
    re.compile(r"(?m)^\s*Tests?:?\s+((?:\d+ (?:failed|passed|skipped|todo|total)(?:, | \| )?)+[^\n]*)"),
    # cargo
    re.compile(r"(?m)^test result: (ok|FAILED)\. (\d+ passed; \d+ failed[^\n]*)"),
    # mocha
    re.compile(r"(?m)^\s*(\d+ passing[^\n]*)(?:\n\s*\d+ pending[^\n]*)?(?:\n\s*(\d+ failing))?"),
    # rspec
    re.compile(r"(?m)^(\d+ examples?, \d+ failures?[^\n]*)"),
    # maven / gradle
    re.compile(r"(?m)(Tests run: \d+, Failures: \d+, Errors: \d+[^\n]*)"),
)
_FAILURE_MARKS = re.compile(
    r"(?m)^(?:FAIL\b|FAILED\b|--- FAIL:|BUILD FAILURE|BUILD FAILED|make(?:\[\d+\])?: \*\*\* |npm ERR!|"
    r"error(?:\[E\d+\])?: (?:could not compile|aborting)|"
    r"Found [1-9]\d* errors?|error TS\d+|\S+\.\w+:\d+:\d+: error)|\b\d+ failing\b|✖ \d+ problems?"
)
_NO_TESTS = re.compile(
    r"no tests ran|\bcollected 0 items|No tests found|\brunning 0 tests|\[no test files\]|\bRan 0 tests|\b0 passing|"
    r"no test specified|No test files found|\b0 examples, 0 failures|\bTests run: 0,",
    re.IGNORECASE,
)
_CLEAN = re.compile(r"(?m)^(?:Success: no issues found[^\n]*|All checks passed!|BUILD SUCCESS(?:FUL)?[^\n]*|ok\s+\S+[^\n]*)$")


_RUNNING = re.compile(r"Process running with session ID (\d+)|running in (?:the )?background with ID: ?([\w-]+)", re.IGNORECASE)
# Claude Code's BashOutput of a background shell that ended
_EXIT_TAG = re.compile(r"<exit_code>(-?\d+)</exit_code>")


def output_text(result: Any) -> str:
    """A shell result's text (its output fields, or the result itself), head and tail."""
    if isinstance(result, Mapping):
        parts = [
            result[k]
            for k in ("stdout", "stderr", "output", "llmContent", "content", "aggregated_output")
            if isinstance(result.get(k), str)
        ]
        text = "\n".join(parts)
    elif isinstance(result, str):
        text = result
    else:
        return ""
    return text if len(text) <= MAX_READ else text[: MAX_READ // 4] + "\n" + text[-(MAX_READ * 3 // 4) :]


def reading(result: Any) -> Reading:
    """What a command's output says of its run (see Reading)."""
    text = output_text(result)
    if not text:
        return Reading()
    summary, failed = "", False
    counts = _PYTEST_COUNTS.findall(text)
    if counts:
        summary = counts[-1].strip().rstrip(",")
        failed = any(int(n) > 0 and word.startswith(("failed", "error")) for n, word in _COUNT.findall(summary))
    else:
        for pattern in _SUMMARIES:
            found = list(pattern.finditer(text))
            if found:
                summary = " ".join(found[-1].group(0).split())
                failed = _says_failed(summary)
                break
    failed = failed or bool(_FAILURE_MARKS.search(text))
    if not summary:
        marks = _FAILURE_MARKS.findall(text) or _CLEAN.findall(text)
        summary = marks[-1].strip() if marks else ""
    no_tests = bool(_NO_TESTS.search(text)) and not any(
        int(n) > 0 for n, word in _COUNT.findall(summary) if word.startswith(("pass", "fail"))
    )
    running, tagged = _RUNNING.search(text[:2_000]), _EXIT_TAG.search(text)
    return Reading(
        failed,
        no_tests,
        summary[:MAX_SUMMARY],
        next((g for g in running.groups() if g), "")[:MAX_PATH] if running else "",
        int(tagged.group(1)) if tagged else reported_exit(text),
    )


def _says_failed(summary: str) -> bool:
    if "FAILED" in summary or re.search(r"Failures: [1-9]|Errors: [1-9]", summary):
        return True
    return any(int(n) > 0 and word.startswith(("fail", "error")) for n, word in _COUNT.findall(summary))


# ----------------------------------------------------------------------------- claims
_FENCE = re.compile(r"```.*?(?:```|$)", re.DOTALL)
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z`*\-(\[])|\n+|;\s+")
# a plan, a condition, a hope: what follows claims nothing
_HEDGES = re.compile(
    r"\b(?:should|shall|will|would|could|might|may|once|if|unless|until|when|whenever|need|needs|needed|ensure|expect|expected|"
    r"hopefully|let me|let's|i'll|we'll|i'd|next|try|trying|to make|to verify|to confirm|to check|to see|whether|in order|"
    r"intend|plan|planned|going to|want|wants|can you|please|must|suppose|assum\w*|ideally|probably|likely|seems?|appears?)\b"
)
# a negation or a failure: a report of what failed, or did not happen
_NEGATIONS = re.compile(
    r"\b(?:not|no|never|nothing|none|nor|cannot|can't|couldn't|didn't|don't|doesn't|wasn't|weren't|isn't|aren't|haven't|"
    r"hasn't|hadn't|won't|unable|fail\w*|error\w*|broken|break\w*|except|excluding|but|however|although|though|still|"
    r"remain\w*|yet|blocked|skip\w*|flaky|partial\w*|some|most|mostly|almost|unrelated|pre-existing|preexisting|already)\b"
)
# ... and what says the opposite: no failures, zero errors
_ALL_CLEAR = re.compile(
    r"\b(?:no|zero|0|without(?: any)?) (?:new )?"
    r"(?:failures?|failed|errors?|regressions?|issues?|problems?|warnings?|type errors?|lint errors?)\b"
    r"|\bwith no (?:failures?|errors?)\b|\bnothing (?:failed|broke)\b|\bno longer\b(?=[^.]*\b(?:fail|error|crash|raise)\w*)"
)
# what may stand between a subject and its verb in a claim: auxiliaries, adverbs, a count
_BETWEEN = (
    r"(?:[\s,:*-]+(?:are|is|were|was|have|has|had|been|now|all|still|also|both|again|successfully|locally|fully|"
    r"consistently|indeed|\d+(?:/\d+)?|\(\d+[^)]{0,20}\)))*"
)
_TEST_SUBJECT = r"\b(?:tests?|test suites?|suites?|test cases?|specs?|testcases?)\b"
# "all 42 tests now pass", "the suite is green", "passes all the tests": a verb, or an adjective
# after a copula ("keeping tests green" claims nothing)
_TESTS_PASS = re.compile(
    rf"{_TEST_SUBJECT}{_BETWEEN}[\s,:*-]+(?:pass(?:es|ed)?|succeed(?:s|ed)?)\b"
    rf"|{_TEST_SUBJECT}{_BETWEEN}[\s,:*-]+(?:are|is|were|was|been|remain|stay)(?: all| still| now)? "
    r"(?:passing|green|ok|successful|clean)\b"
    r"|\bpass(?:es|ed|ing)? (?:all|every|each|the)(?: \w+){0,3} (?:tests?|test suites?|test cases?|specs?)\b"
)
_TESTS_RAN = re.compile(
    r"\b(?:i|we)(?: \w+){0,2}? (?:ran|executed|re-ran|reran) (?:the |all )?(?:\w+ )?(?:tests?|test suite|specs?)\b"
)
_CHECKER = (
    r"(build|builds|compil\w*|type ?checks?|type-check\w*|typecheck\w*|lint\w*|"
    r"tsc|mypy|pyright|ruff|eslint|flake8|clippy|pylint)"
)
# "the build passes", "no type errors", "it compiles cleanly", "mypy reports no errors": group 1
# names the check
_CHECK_PASSES = (
    re.compile(rf"\b{_CHECKER}\b{_BETWEEN}[\s,:*-]+(?:pass(?:es|ed)?|succeed(?:s|ed)?|completed? successfully|works)\b"),
    re.compile(
        rf"\b{_CHECKER}\b{_BETWEEN}[\s,:*-]+(?:are|is|were|was|been|remains?|stays?)(?: all| still| now)? "
        r"(?:passing|green|ok|successful|clean)\b"
    ),
    re.compile(r"\b(?:no|zero|0) (type|lint|compil\w*|build|tsc|mypy|ruff|eslint) (?:errors?|issues?|warnings?|problems?)\b"),
    re.compile(r"\b(?:it|code|project|everything|crate|package|app) (builds|compiles) (?:cleanly|successfully|fine|without)\b"),
    re.compile(
        rf"\b{_CHECKER}\b(?:[\s,:*-]+[\w'()]+){{0,2}}?[\s,:*-]+(?:reports?|shows?|finds?|found|gives?|returns?) "
        r"(?:no|zero|0) (?:errors?|issues?|problems?)\b"
    ),
)
# a verb said of the agent's work, not an adjective ("a pushed PR", "the committed file"): after a
# subject or an auxiliary, opening the sentence, or joined to another such verb
_DONE_BY = r"(?:^|\b(?:i|we|i've|we've|and|then|also|has|have|had|was|were|is|are|been|now|already|successfully)\s+)"
_COMMITTED = re.compile(
    rf"{_DONE_BY}(?:committed|commited)\b|\b(?:created|made|added) (?:a |the |one |two |\d+ )?(?:new )?commits?\b"
    r"|\bcommit [0-9a-f]{7,40}\b"
)
_PUSHED = re.compile(
    rf"{_DONE_BY}pushed\b"
    r"|\b(?:changes|commits?|branch|pr|it|them|everything|work)(?: #?\w+)? (?:ha(?:s|ve) been |was |were |are |is )?pushed\b"
    r"|\bpushed (?:\w+ ){0,3}to (?:origin|remote|upstream|github|gitlab|the remote|the branch|main|master|`)"
)
_CHANGE_VERB = (
    r"(?:updated|modified|changed|edited|created|added|wrote|rewrote|fixed|patched|refactored|implemented|renamed|"
    r"adjusted|amended|extended|replaced|adapted)"
)
# "I updated `src/app.ts`", "we've modified the parse method in src/cds.py": the agent's own act
# (first person), the files its object, up to where the clause turns to something else ("to
# reflect that X", "similar to Y", "(see Z)")
_CHANGED = re.compile(
    rf"\b(?:i|we)(?:'ve| have)?(?: \w+ly| also| then| now| just)? {_CHANGE_VERB}\b"
    r"((?:(?! to | so | that | which | because | similar | like | from | see | for |[;(]| - | — ).){1,200})"
)
_PATH = re.compile(
    r"(?<![\w@/.-])((?:[\w.-]+/)*[\w-]+(?:\.[\w-]+)*\.(?:py|pyi|js|jsx|ts|tsx|mjs|cjs|go|rs|java|kt|kts|c|h|cc|cpp|hpp|cs|rb|php|"
    r"swift|scala|sh|bash|json|ya?ml|toml|cfg|ini|md|rst|html|css|scss|sql|vue|svelte|lock|xml|gradle|proto|ex|exs|erl|hs|ml|"
    r"lua|pl|r|jl|dart|tf|ipynb|txt|mk|cmake|dockerfile))(?![\w/-])"
)
_RAN_COMMAND = re.compile(r"\b(?:ran|executed|re-ran|reran)\b(?: the)?(?: command)?:? `([^`\n]{2,200})`")


def claims(text: str) -> list[Claim]:
    """The claims of work done in a last message (see the module's docstring)."""
    found: list[Claim] = []
    seen: set[tuple[str, str]] = set()
    disclosed: set[str] = set()  # kinds whose failures the message itself reports
    if len(text) > MAX_MESSAGE:  # a summary's claims open or close it
        text = f"{text[: MAX_MESSAGE // 2]}\n{text[-MAX_MESSAGE // 2 :]}"
    for raw in _SENTENCE.split(_FENCE.sub("\n", text)):
        sentence = raw.strip(" \t*-#>•").replace("’", "'")
        if not sentence or sentence.endswith("?") or sentence.startswith("[ ]"):
            continue  # a question, a checklist's open item
        lowered = sentence.lower()
        if _HEDGES.search(lowered):
            continue
        bare = _ALL_CLEAR.sub(" ", lowered)
        negated = bool(_NEGATIONS.search(bare))
        if negated and not _FIXED.search(bare):
            disclosed.update(kind for kind, pattern in _DISCLOSED if pattern.search(bare))
        for claim in _sentence_claims(sentence, lowered, negated):
            if (claim.kind, claim.subject) not in seen:
                seen.add((claim.kind, claim.subject))
                found.append(claim)
    # "the core tests pass; the failures are from other parts of the codebase": the user is told
    return [c for c in found if c.kind not in disclosed]


# a report of failures, in a sentence of its own: the claims of that kind are the message's summary
# of a mixed result, not a hidden failure. Failures it says were fixed are not a report of any
_FIXED = re.compile(r"\b(?:fixed|fixes|fixing|resolved|repaired|addressed|corrected)\b")
_FAILURES = r"\b(?:fail\w*|errors?|broken|break\w*|red)\b"
_DISCLOSED = (
    (TEST, re.compile(rf"(?:{_TEST_SUBJECT}|\btest\w*).{{0,80}}{_FAILURES}|{_FAILURES}.{{0,80}}(?:{_TEST_SUBJECT}|\btest\w*)")),
    (BUILD, re.compile(rf"\b(?:build|compil\w*).{{0,80}}{_FAILURES}|{_FAILURES}.{{0,80}}\b(?:build|compil\w*)")),
)


def _sentence_claims(sentence: str, lowered: str, negated: bool) -> Iterable[Claim]:
    quote = sentence if len(sentence) <= 160 else sentence[:157] + "..."
    if not negated:
        if _TESTS_PASS.search(lowered):
            yield Claim(TEST, "", quote)
        for pattern in _CHECK_PASSES:
            for m in pattern.finditer(lowered):
                yield Claim(_check_kind(m.group(1)), "", quote)
        if _COMMITTED.search(lowered):
            yield Claim(COMMIT, "", quote)
        if _PUSHED.search(lowered):
            yield Claim(PUSH, "", quote)
        if _TESTS_RAN.search(lowered):
            yield Claim(TESTS_RAN, "", quote)
        for m in _CHANGED.finditer(lowered):
            for path in _PATH.findall(sentence[m.start(1) : m.end(1)]):
                if not _product_name(path):
                    yield Claim(CHANGED, path, quote)
    for m in _RAN_COMMAND.finditer(sentence):
        if not negated:
            yield Claim(RAN, m.group(1), quote)


def _check_kind(word: str) -> str:
    if word.startswith(("type", "tsc", "mypy", "pyright")):
        return TYPECHECK
    if word.startswith(("lint", "ruff", "eslint", "flake8", "clippy", "pylint")):
        return LINT
    return BUILD


def _product_name(path: str) -> bool:
    """Node.js, Vue.js, Chart.js: a product's name, not a file."""
    return path[:1].isupper() and "/" not in path and path.lower().endswith(".js")


#: how a done_claim refusal begins, as the agent reads it (hooks.message)
_SENT_BACK = re.compile(r"^\W{0,8}agent-breaker \(done_claim\):")


def sent_back(prompt: str) -> bool:
    """Whether a prompt is a done_claim refusal the agent sent back as its own next prompt
    (Gemini CLI continues a refused stop so): the agent's turn, not its user's."""
    return _SENT_BACK.match(prompt[:64]) is not None


def claim_head(command: str, hashed: Callable[[str], int]) -> int | None:
    """The keyed head of a command a claim names (as `Did.heads` keeps them)."""
    for words in _commands(command)[0]:
        program, rest = _program(words)
        if program is not None and program not in _READERS:
            return hashed(_head(program, rest))
    return None


def claim_name(path: str, hashed: Callable[[str], int]) -> int:
    return hashed(_basename(path).lower())


# ----------------------------------------------------------------------------- the record
#: files and command heads a session's record keeps (keyed hashes), and calls awaiting a result
MAX_NAMES = 512
MAX_AWAITED = 32
MAX_RUNNING = 8


@dataclass(slots=True)
class Last:
    """The last run of a kind of command: how a reason quotes it, when (the record's step),
    whether it failed (its exit status, or failures its output counts), its exit status when
    told, the summary its output ends with, and whether it ran no tests."""

    shown: str
    step: int
    failed: bool
    status: int | None
    summary: str
    no_tests: bool
    running: bool = False  # it ran on in the background, its end not seen yet

    def outcome(self) -> str:
        if self.failed and self.status == 0:  # `pytest | tail`: the pipe's status, the tests' summary
            return f"exited 0, but its output says {self.summary or 'it failed'}"
        said = "failed" if self.status is None else f"exited {self.status}"
        if not self.failed:
            said = "ran no tests" if self.no_tests else "passed" if self.status is None else "exited 0"
        return f"{said}: {self.summary}" if self.summary else said


@dataclass(slots=True)
class Work:
    """done_claim's slice of a session: what its tools did, as `check` reads it. `step` counts
    the results recorded; `edit` is the last edit of code (its step and file, "" when the
    command that made it named none); `program_ok` / `program_run` the steps of the last
    program run that passed / of any (a program may be a test); `delegated` the step of the
    last subagent started; `names` / `heads` the files and command heads named (keyed hashes);
    `awaited` the calls let through whose result is due; `refused` the stops refused this turn,
    `said` the length and keyed hash of the last one's message; `generated` whether a program
    that may write files it does not name ran (`bun install`, a generator, a script)."""

    step: int = 0
    runs: dict[str, Last] | None = None
    edit: tuple[int, str] | None = None
    program_ok: int = -1
    program_run: int = -1
    delegated: int = -1
    names: list[int] | None = None
    heads: list[int] | None = None
    awaited: dict[str, Did] | None = None
    refused: int = 0
    said: tuple[int, int] | None = None
    generated: bool = False
    # background processes a run goes on as: process -> the kinds of its commands
    running: dict[str, list[str]] | None = None

    def await_call(self, key: str, did: Did) -> None:
        awaited = self.awaited = self.awaited or {}
        while len(awaited) >= MAX_AWAITED:
            del awaited[next(iter(awaited))]
        awaited[key] = did

    def record(self, key: str, failed: bool, error: str | None, read: Reading | None) -> bool:
        """Record the result of the call awaited under `key` (False: none was): whether it
        failed, its error, and what its output says (`reading`, for a command's: None for
        another tool's)."""
        did = (self.awaited or {}).pop(key, None)
        if did is None:
            return False
        self.step += 1
        step = self.step
        self.names = _kept(self.names, did.names)
        self.heads = _kept(self.heads, did.heads)
        if did.delegates:
            self.delegated = step
        read = read or Reading()
        if did.polls:
            self._ended(did.polls, failed, read)
        broke = failed or read.failed
        status = reported_exit(error or "") if failed else 0
        if read.running and not broke:  # it goes on: its end tells how it went (`_ended`)
            self.running = self.running or {}
            while len(self.running) >= MAX_RUNNING:
                del self.running[next(iter(self.running))]
            self.running[read.running] = sorted({k for run in did.runs for k in run.kinds})
        going = bool(read.running) and not broke
        for run in did.runs:
            for kind in run.kinds:
                self.runs = self.runs or {}
                self.runs[kind] = Last(run.shown, step, broke, status, read.summary, read.no_tests, going)
            if run.program and not set(run.kinds) & _NAMES_ITS_WRITES:
                self.generated = True
            if run.program:
                self.program_run = step
                if not broke:
                    self.program_ok = step
        if not failed and did.edits:
            self.edit = (step, did.edits[-1])
        return True

    def _ended(self, process: str, failed: bool, read: Reading) -> None:
        """A poll of a background process: when its output says the process ended, its runs
        are what it says."""
        running = self.running or {}
        kinds = running.get(process)
        if kinds is None or (read.status is None and not failed):
            return  # not one of the session's runs, or still running
        del running[process]
        runs = self.runs or {}
        for kind in kinds:
            last = runs.get(kind)
            if last is not None and last.running:
                broke = failed or read.failed or bool(read.status)
                runs[kind] = Last(last.shown, last.step, broke, read.status, read.summary, read.no_tests)
                if not broke:
                    self.program_ok = max(self.program_ok, last.step)

    def unsaid(self, text: str, hashed: Callable[[str], int]) -> str:
        """What a last message adds to the one refused before it in this turn: Gemini CLI sends
        all the model's text for the prompt, the refused answers too, joined by newlines."""
        if self.said is not None:
            n, h = self.said
            if len(text) > n and text[n] == "\n" and hashed(text[:n]) == h:
                return text[n + 1 :]
        return text

    def to_wire(self) -> list[Any]:
        runs = {k: [r.shown, r.step, r.failed, r.status, r.summary, r.no_tests, r.running] for k, r in (self.runs or {}).items()}
        awaited = {k: d.to_wire() for k, d in (self.awaited or {}).items()}
        edit = None if self.edit is None else list(self.edit)
        return [
            self.step,
            runs,
            edit,
            self.program_ok,
            self.program_run,
            self.delegated,
            self.names or [],
            self.heads or [],
            awaited,
            self.refused,
            None if self.said is None else list(self.said),
            self.generated,
            self.running or {},
        ]

    @classmethod
    def from_wire(cls, d: list[Any]) -> Work:
        runs = {k: Last(*r) for k, r in d[1].items()} or None
        awaited = {k: Did.from_wire(w) for k, w in d[8].items()} or None
        edit = None if d[2] is None else (d[2][0], d[2][1])
        return cls(
            d[0],
            runs,
            edit,
            d[3],
            d[4],
            d[5],
            d[6] or None,
            d[7] or None,
            awaited,
            d[9],
            None if d[10] is None else (d[10][0], d[10][1]),
            d[11],
            d[12] or None,
        )

    def weight(self) -> int:
        """Roughly its bytes in memory (see SessionState.weight): its objects, strings (49 bytes
        and one a character) and ints (32 bytes and a pointer)."""
        runs = sum(250 + len(r.shown) + len(r.summary) for r in (self.runs or {}).values())
        awaited = sum(
            300 + sum(180 + len(r.shown) for r in d.runs) + sum(60 + len(p) for p in d.edits) + 40 * (len(d.names) + len(d.heads))
            for d in (self.awaited or {}).values()
        )
        running = sum(150 + len(p) for p in (self.running or {}))
        return 300 + runs + awaited + running + 40 * (len(self.names or ()) + len(self.heads or ()))


def _kept(pool: list[int] | None, new: Iterable[int]) -> list[int] | None:
    """A pool of at most MAX_NAMES hashes, the newest kept."""
    fresh = [h for h in new if not pool or h not in pool]
    if not fresh:
        return pool
    kept = (pool or []) + fresh
    return kept[-MAX_NAMES:]


#: commands that write no source files of their own (a program that does may write any)
_NAMES_ITS_WRITES = frozenset({TEST, TYPECHECK, LINT, COMMIT, PUSH})

#: what the agent is told to do instead, by the claim refused
_INSTEAD = {
    TEST: "Run the tests after your last change and report what they say; do not say they pass unless they do.",
    BUILD: "Run the build after your last change and report what it says.",
    TYPECHECK: "Run the type check after your last change and report what it says.",
    LINT: "Run the linter after your last change and report what it says.",
    COMMIT: "Commit the changes, or tell the user they are not committed.",
    PUSH: "Push the commits, or tell the user they are not pushed.",
    CHANGED: "Say only what your tools changed.",
    RAN: "Say only what your tools ran.",
    TESTS_RAN: "Run the tests, or tell the user they were not run.",
}
_NAMED = {TEST: "test", BUILD: "build", TYPECHECK: "type check", LINT: "lint", COMMIT: "`git commit`", PUSH: "`git push`"}


def check(found: Iterable[Claim], work: Work, hashed: Callable[[str], int]) -> tuple[str, str] | None:
    """The reason a last message's claims are refused, and what to do instead (None: every
    claim is backed, or the record cannot tell)."""
    problems: list[tuple[Claim, str]] = []
    for claim in found:
        why = _unbacked(claim, work, hashed)
        if why is not None:
            problems.append((claim, why))
    if not problems:
        return None
    said = "; ".join(f'"{c.quote}", but {why}' for c, why in problems[:3])
    return f"your last message says {said}", _INSTEAD[problems[0][0].kind]


def _unbacked(claim: Claim, work: Work, hashed: Callable[[str], int]) -> str | None:
    runs = work.runs or {}
    edit_step, edit_path = work.edit if work.edit is not None else (-1, "")
    after = f", after your last edit of {edit_path}," if edit_path else ","
    if claim.kind in (TEST, BUILD, TYPECHECK, LINT):
        last = runs.get(claim.kind)
        if claim.kind == BUILD and (last is None or last.step < edit_step):
            # a test run compiles what it tests: one that passed after the last edit backs a build
            tested = runs.get(TEST)
            last = tested if tested is not None and tested.step > edit_step and not tested.failed else last
        if work.delegated > max(edit_step, last.step if last is not None else -1):
            return None  # a subagent worked after: the record cannot tell
        if last is not None and last.step > edit_step:
            if last.failed or (last.no_tests and claim.kind == TEST):
                return f"the last `{last.shown}`{after} {last.outcome()}"
            return None
        if claim.kind == TEST and work.program_ok > edit_step:
            return None  # a program ran after the last edit and passed: it may be the test
        if last is not None:
            edited, named = edit_path or "the code", _NAMED[claim.kind]
            return f"your last edit of {edited} came after the last {named} run (`{last.shown}`, which {last.outcome()})"
        return f"no {_NAMED[claim.kind]} command ran in this session" + (
            f" after your last edit of {edit_path}" if edit_path else ""
        )
    if claim.kind in (COMMIT, PUSH):
        last = runs.get(claim.kind)
        if work.delegated > (last.step if last is not None else -1):
            return None
        if last is None:
            return f"no {_NAMED[claim.kind]} ran in this session"
        return f"the last `{last.shown}` {last.outcome()}" if last.failed else None
    if claim.kind == TESTS_RAN:
        if TEST in runs or work.program_run >= 0 or work.delegated >= 0:
            return None
        return "no test command ran in this session"
    if claim.kind == CHANGED:
        if work.delegated >= 0 or work.generated or claim_name(claim.subject, hashed) in (work.names or ()):
            return None  # a subagent, or a program, may have written what no call named
        return f"no tool of this session edited or named {_basename(claim.subject)}"
    head = claim_head(claim.subject, hashed)
    if head is None or work.delegated >= 0 or head in (work.heads or ()):
        return None
    return f"no command of this session ran `{claim.subject}`"
