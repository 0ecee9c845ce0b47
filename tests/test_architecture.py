"""The package's shape: no import cycles (imports inside functions and TYPE_CHECKING blocks count too), and the
data-flow stages do not import the stages after them."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "llm_policy_gen"


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


def test_no_import_cycles_anywhere_in_the_package():
    assert find_cycles(import_graph()) == []


def test_the_checker_finds_a_cycle():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_early_stages_never_import_later_ones():
    g = import_graph()
    later = {"llm_policy_gen.engine", "llm_policy_gen.cli", "llm_policy_gen.compare", "llm_policy_gen.modes"}

    def reach(start: str) -> set[str]:
        seen, todo = set(), [start]
        while todo:
            for w in g[todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen

    for stage in ("llm_policy_gen.discretize", "llm_policy_gen.collect", "llm_policy_gen.memory",
                  "llm_policy_gen.prompt", "llm_policy_gen.formats.base", "llm_policy_gen.clients.base",
                  "llm_policy_gen.session", "llm_policy_gen.keeper", "llm_policy_gen.proposers.base"):
        assert not (reach(stage) & later), stage
    for client in ("openai", "anthropic", "gemini"):
        client = f"llm_policy_gen.clients.{client}"
        assert "llm_policy_gen.prompt" not in reach(client) and "llm_policy_gen.session" not in reach(client)
