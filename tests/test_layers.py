"""The package's layers: no import cycle among agent_breaker's modules, counting every import;
each module on a floor that imports nothing above it; the NeMo glue imported by nothing else.

Read from the source with `ast`, not by importing: every import counts, at module level (also
under `if`/`try`/`with`), inside functions and under `if TYPE_CHECKING:` (a cycle dodged by a
lazy import is still a cycle: the two modules cannot be read, tested or moved apart). Importing
`agent_breaker.store.memory` runs `agent_breaker/store/__init__.py` first, so it depends on that
package too; not on the
root package (every import starts there) nor on a package the importer is itself part of
(already loading), unless it imports from it by name (`from agent_breaker import Engine`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: where each package's source lives (pyproject's package-dir: the NeMo actions live in actions/)
SOURCES = {"agent_breaker": ROOT / "agent_breaker", "agent_breaker.actions": ROOT / "actions"}


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package)."""
    out: dict[str, tuple[Path, bool]] = {}
    for prefix, folder in SOURCES.items():
        for path in folder.rglob("*.py"):
            parts = [*prefix.split("."), *path.relative_to(folder).with_suffix("").parts]
            package = parts[-1] == "__init__"
            out[".".join(parts[:-1] if package else parts)] = (path, package)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _module_level_imports(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module loads: not in functions or classes' methods, not
    under `if TYPE_CHECKING:` (its `else:` does run)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, ast.If):
            if not _is_type_checking(node.test):
                yield from _module_level_imports(node.body)
            yield from _module_level_imports(node.orelse)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _module_level_imports(block)
        elif isinstance(node, (ast.With, ast.ClassDef)):
            yield from _module_level_imports(node.body)


def _every_import(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import of a module: at load, inside functions, under `if TYPE_CHECKING:`."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node


def import_graph(*, module_level_only: bool = False) -> dict[str, set[str]]:
    """Each of agent_breaker's modules -> the modules of agent_breaker it imports: every import
    (a cycle dodged by a function-level or a TYPE_CHECKING import is still a cycle), or only
    those that run when it loads."""
    modules = _modules()

    def owner(name: str) -> str | None:
        """The module a dotted name is or lives in (`a.b.func` -> `a.b`)."""
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, (path, package) in modules.items():
        here = name if package else name.rpartition(".")[0]
        deps: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        imports = _module_level_imports(tree.body) if module_level_only else _every_import(tree)
        for node in imports:
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    parts = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                # `from pkg import sub` imports the submodule; `from mod import name`, the module
                targets = [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                dep = owner(target)
                if dep is None:
                    continue
                deps.add(dep)
                # the packages Python runs on the way to it
                parts = dep.split(".")
                for n in range(2, len(parts)):
                    package = ".".join(parts[:n])
                    if not name.startswith(package + "."):
                        deps.add(package)
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path a -> b -> ... -> a) per strongly connected component of size > 1
    (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return [_path_within(graph, component) for component in components]


def _path_within(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A cycle through the component's first module, for the failure message."""
    start = min(component)
    seen = {start: [start]}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for dep in sorted(graph[node] & component):
            if dep == start:
                return [*seen[node], start]
            if dep not in seen:
                seen[dep] = [*seen[node], dep]
                frontier.append(dep)
    raise AssertionError(f"no cycle through {start}")  # unreachable for a strong component


def test_no_import_cycle_among_the_packages_modules():
    graph = import_graph()
    assert "agent_breaker.verdicts" in graph and "agent_breaker.actions.guards" in graph  # it read the package
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_cycle_finder_counts_every_import(tmp_path, monkeypatch):
    pkg = tmp_path / "agent_breaker"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import A\n")
    (pkg / "a.py").write_text("from .sub.b import B\nA = 1\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from ..c import C\nB = 2\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\ndef f():\n    from . import a\nC = 3\n"
    )
    monkeypatch.setitem(SOURCES, "agent_breaker", pkg)
    monkeypatch.setitem(SOURCES, "agent_breaker.actions", tmp_path / "none")
    # a cycle dodged by a TYPE_CHECKING or a function-level import is still a cycle ...
    cycle = [["agent_breaker.a", "agent_breaker.sub.b", "agent_breaker.c", "agent_breaker.a"]]
    assert find_cycles(import_graph()) == cycle
    # ... which the imports that run at load alone would not show
    assert find_cycles(import_graph(module_level_only=True)) == []
    (pkg / "c.py").write_text("from agent_breaker.a import A\nC = 3\n")
    assert find_cycles(import_graph()) == [["agent_breaker.a", "agent_breaker.sub.b", "agent_breaker.c", "agent_breaker.a"]]
    # importing a submodule runs its package's __init__ first
    (pkg / "c.py").write_text("C = 3\n")
    (pkg / "sub" / "__init__.py").write_text("from agent_breaker.a import A\n")
    (pkg / "sub" / "d.py").write_text("D = 4\n")
    (pkg / "a.py").write_text("from agent_breaker.sub.d import D\nA = 1\n")
    assert find_cycles(import_graph()) == [["agent_breaker.a", "agent_breaker.sub", "agent_breaker.a"]]


#: the floors, from the top: the NeMo glue hangs off the rest (NeMo loads it; nothing of ours
#: does); the edges (server, hooks' processes, drop-ins, CLI) call the spine (the dispatch and
#: what every edge shares), which calls the engine, which decides over the core (events, verdicts,
#: config, breaker, detectors, governor, stores, escalations: pure deciders and their state)
FLOORS = (
    ("glue", ("agent_breaker.actions",)),
    (
        "edges",
        (
            "agent_breaker",  # the package's face imports what it exports
            "agent_breaker.__main__",
            "agent_breaker._hook_client",
            "agent_breaker.cli",
            "agent_breaker.server",
            "agent_breaker.hooks.guard",
            "agent_breaker.hooks.command",
            "agent_breaker.hooks.daemon",
            "agent_breaker.integrations",
            "agent_breaker._demo",
            "agent_breaker.sessions",
            "agent_breaker._reference",
        ),
    ),
    (
        "spine",
        (
            "agent_breaker.dispatch",
            "agent_breaker._aio",
            "agent_breaker._served",
            "agent_breaker._replay",
            "agent_breaker._guarded",
            "agent_breaker._admin",
            "agent_breaker._openai_format",
            "agent_breaker.escalations.operator",
            "agent_breaker.report",
        ),
    ),
    ("engine", ("agent_breaker.engine",)),
)
CORE = "core"


def floor_of(module: str) -> str:
    """A module's floor: the first whose names it is (or is inside); else the core."""
    for name, modules in FLOORS:
        for prefix in modules:
            if module == prefix or (prefix != "agent_breaker" and module.startswith(prefix + ".")):
                return name
    return CORE


def upward_arrows(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports of a module on a higher floor than the importer's."""
    height = {CORE: 0, **{name: len(FLOORS) - i for i, (name, _) in enumerate(FLOORS)}}
    return sorted((m, d) for m, deps in graph.items() for d in deps if height[floor_of(d)] > height[floor_of(m)])


def test_every_import_goes_down_or_along_a_floor():
    graph = import_graph()
    assert {floor_of(m) for m in graph} == {CORE, *(name for name, _ in FLOORS)}  # each floor has rooms
    arrows = upward_arrows(graph)
    assert not arrows, "upward imports:\n" + "\n".join(f"{m} ({floor_of(m)}) -> {d} ({floor_of(d)})" for m, d in arrows)


def test_nothing_outside_the_nemo_glue_imports_it():
    graph = import_graph()
    glue = [m for m in graph if floor_of(m) == "glue"]
    assert "agent_breaker.actions.guards" in glue
    importers = sorted(m for m, deps in graph.items() if m not in glue and deps & set(glue))
    assert importers == []


def test_an_upward_import_is_found(tmp_path, monkeypatch):
    pkg = tmp_path / "agent_breaker"
    (pkg / "engine").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine" / "__init__.py").write_text("")
    (pkg / "verdicts.py").write_text("def f():\n    from .engine import Engine\n")
    monkeypatch.setitem(SOURCES, "agent_breaker", pkg)
    monkeypatch.setitem(SOURCES, "agent_breaker.actions", tmp_path / "none")
    assert upward_arrows(import_graph()) == [("agent_breaker.verdicts", "agent_breaker.engine")]


def test_the_shipped_configs_link_the_rails_and_copy_none():
    """A config folder's Colang files are links to rails/ (a copy drifts from the flows it copies)."""
    configs = [folder for folder in (ROOT / "config").iterdir() if (folder / "config.yml").is_file()]
    assert len(configs) >= 5
    for folder in configs:
        for flow in folder.glob("*.co"):
            assert flow.is_symlink() and flow.resolve().parent == ROOT / "rails", flow


#: below the edges, the modules that read the environment: the config loaders the edges call
#: (`parse_config`, `nemo_block`, `load_config`: their `environ` defaults to this process's)...
READS_ENVIRONMENT = {
    "agent_breaker.config",  # the loaders' default, read once by `with_environment`
    "agent_breaker._extras",  # NeMo's usage-stats switch, set before NeMo loads
    "agent_breaker._tracing",  # `export_from_env`, which `serve` calls at start
    # the process's one Prometheus registry, made once on first use: its label cap is the
    # process's, not a config's
    "agent_breaker.metrics",
}


def test_the_environment_is_read_at_the_edges_only():
    modules = _modules()
    readers = set()
    for name, (path, _) in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "environb", "putenv"):
                readers.add(name)
    below = {m for m in readers if floor_of(m) not in ("edges", "glue")}
    assert below <= READS_ENVIRONMENT, sorted(below - READS_ENVIRONMENT)
    assert "agent_breaker.config" in readers  # it read the package
