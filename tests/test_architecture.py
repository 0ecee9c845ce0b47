"""The package's shape: no import cycles (imports inside functions and TYPE_CHECKING blocks count too), and the
data-flow stages do not import the stages after them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "llm_policy_gen"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in PKG.rglob("*.py")}


def import_graph() -> dict[str, set[str]]:
    """Module -> the package modules it imports anywhere in its text."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_pkg = path.name == "__init__.py"
        base = name.split(".") if is_pkg else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base[: len(base) - node.level + 1]
                    mod = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [mod]
                targets += [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in mods]
            for t in targets:
                if t in mods and t != name:
                    graph[name].add(t)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def read_graph() -> dict[str, set[str]]:
    """The import graph, refused when it was not read whole: a guard that passes on an empty graph guards nothing."""
    graph = import_graph()
    edges = sum(len(targets) for targets in graph.values())
    assert len(graph) > 50, f"only {len(graph)} modules read under {PKG}"
    assert edges > len(graph), f"only {edges} imports found among {len(graph)} modules"
    assert "llm_policy_gen.errors" in graph["llm_policy_gen.cli"]  # a plain `from .errors import ...`
    assert "llm_policy_gen.errors" in graph["llm_policy_gen.config"]
    return graph


def test_no_import_cycles_anywhere_in_the_package():
    assert find_cycles(read_graph()) == []


def test_the_graph_holds_every_module_and_a_cycle_in_it_would_be_found():
    graph = read_graph()
    assert set(graph) == {_module_name(p) for p in PKG.rglob("*.py")}
    assert all(graph[m] for m in ("llm_policy_gen.cli", "llm_policy_gen.config", "llm_policy_gen.loggers.writers"))
    closed = {m: set(targets) for m, targets in graph.items()}
    closed["llm_policy_gen.errors"].add("llm_policy_gen.cli")  # cli -> ... -> errors, and now errors -> cli
    assert any({"llm_policy_gen.cli", "llm_policy_gen.errors"} <= set(c) for c in find_cycles(closed))


def test_the_checker_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_early_stages_never_import_later_ones():
    g = read_graph()
    later = {m for m in g if m in ("llm_policy_gen.run", "llm_policy_gen.sweep", "llm_policy_gen.commands")
             or m.startswith(("llm_policy_gen.run.", "llm_policy_gen.sweep.", "llm_policy_gen.commands."))}
    later |= {"llm_policy_gen.cli", "llm_policy_gen.modes"}
    assert "llm_policy_gen.run.driver" in later

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for w in g[todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    for stage in ("llm_policy_gen.discretize", "llm_policy_gen.collect", "llm_policy_gen.prompting.memory",
                  "llm_policy_gen.prompting.builder", "llm_policy_gen.formats.base", "llm_policy_gen.clients.base",
                  "llm_policy_gen.clients.session", "llm_policy_gen.keeper", "llm_policy_gen.proposers.base"):
        assert not (reach(stage) & later), stage
    for client in ("openai", "anthropic", "gemini"):
        client = f"llm_policy_gen.clients.{client}"
        assert "llm_policy_gen.prompting.builder" not in reach(client)
        assert "llm_policy_gen.clients.session" not in reach(client)


def test_the_driver_imports_few_package_modules():
    """The iteration driver sees the run's services, records and stops, not the parts behind them."""
    g = read_graph()
    assert len(g["llm_policy_gen.run.driver"]) < 12, sorted(g["llm_policy_gen.run.driver"])
    assert "llm_policy_gen.keeper" not in g["llm_policy_gen.run.driver"]


def test_modes_reach_the_run_only_through_its_services():
    """No mode imports the run package or the keeper: what a mode may do is RunServices (mypy checks the modes
    against it, so a mode that reached for the keeper or the collector through ``run`` would not type-check)."""
    g = read_graph()
    for mode in (m for m in g if m.startswith("llm_policy_gen.modes.")):
        assert not {w for w in g[mode] if w == "llm_policy_gen.run" or w.startswith("llm_policy_gen.run.")}, mode
        if mode != "llm_policy_gen.modes.base":  # the seam itself names the keeper's Verdict, a record
            assert "llm_policy_gen.keeper" not in g[mode], mode


def test_no_test_module_changes_the_environment_when_imported():
    """Settings for one test belong in that test (monkeypatch), not in os.environ at import, where they leak into
    every test collected after it."""
    modules = sorted(p.stem for p in (ROOT / "tests").glob("test_*.py"))
    assert len(modules) > 40
    code = (
        "import importlib, os, sys\n"
        "import gymnasium, pytest, llm_policy_gen.cli\n"  # what libraries set when first imported is not ours
        "sys.path.insert(0, 'tests')\n"
        "changed = {}\n"
        "for name in sys.argv[1:]:\n"
        "    before = dict(os.environ)\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except BaseException:\n"  # a module-level skip (pytest.importorskip) still counts what it set
        "        pass\n"
        "    diff = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))\n"
        "    if diff:\n"
        "        changed[name] = diff\n"
        "print(changed)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *modules], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "{}", proc.stdout
