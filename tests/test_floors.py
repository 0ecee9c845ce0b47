"""The package's floors hold (issue 60 item 3): every import runs down a floor or stays on its own, as the committed
map ``tests/data/floors.toml`` draws them, but for the few it lists as going up (at most 2).

An import counts wherever it is written: at the top of a module, inside a function, under ``TYPE_CHECKING``, and
the lazy ones a string names: a registry's entry point or registry name (``"llm_policy_gen.modes:MODES"``), a
``names=`` of a setting, and the relative module strings handed to ``importlib.import_module(..., __name__)``.
"""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from test_limits import _modules

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "llm_policy_gen"
MAP = ROOT / "tests" / "data" / "floors.toml"
MAX_UP = 2

_ABSOLUTE = re.compile(r"^([A-Za-z_]\w*(?:\.\w+)*)(?::[\w.]+)?$")
_RELATIVE = re.compile(r"^(\.+)(\w+(?:\.\w+)*)$")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    how: str
    """``import`` (a statement, wherever it is) or ``string`` (a lazy import a string names)."""


def modules(pkg: Path = PKG) -> dict[str, Path]:
    """Dotted name -> file of every module of ``pkg`` (its ``__init__`` named as the package)."""
    return _modules(pkg)


def _known(name: str, mods: dict[str, Path]) -> str | None:
    """The longest module of the package that ``name`` is or lies in (``pkg.mod.Class`` -> ``pkg.mod``)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def edges(pkg: Path = PKG) -> list[Edge]:
    """Every import of every module of ``pkg`` of another module of ``pkg``."""
    mods = modules(pkg)
    top = pkg.name
    out: list[Edge] = []
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        bare = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        relative_strings = "import_module(" in text
        for node in ast.walk(tree):
            found: list[tuple[str, str]] = []
            if isinstance(node, ast.Import):
                found = [(a.name, "import") for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                found = [(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base, "import") for a in node.names]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare:
                absolute = _ABSOLUTE.match(node.value)
                relative = _RELATIVE.match(node.value) if relative_strings else None
                if absolute and (absolute.group(1) == top or absolute.group(1).startswith(top + ".")):
                    found = [(absolute.group(1), "string")]
                elif relative:
                    dots, rest = relative.groups()
                    anchor = package.split(".")[: len(package.split(".")) - (len(dots) - 1)]
                    found = [(".".join([*anchor, rest]), "string")]
            for target, how in found:
                known = _known(target, mods) if target == top or target.startswith(top + ".") else None
                if known and known != name:
                    out.append(Edge(name, known, getattr(node, "lineno", 0), how))
    return out


def load_map(path: Path = MAP) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def floors(drawn: dict[str, Any], top: str = "llm_policy_gen") -> dict[str, int]:
    """Entry (a dotted module or package) -> its floor's number, 0 the lowest."""
    out: dict[str, int] = {}
    for number, floor in enumerate(drawn["floors"]):
        for entry in floor["modules"]:
            out[top if entry == "." else f"{top}.{entry}"] = number
    return out


def floor_of(module: str, entries: dict[str, int]) -> int | None:
    """The floor of ``module``'s longest entry; None when no entry holds it."""
    name = module
    while name:
        if name in entries:
            return entries[name]
        name = name.rpartition(".")[0]
    return None


def going_up(found: list[Edge], entries: dict[str, int]) -> list[Edge]:
    return [e for e in found if (floor_of(e.source, entries) or 0) < (floor_of(e.target, entries) or 0)]


def _short(module: str) -> str:
    return module.removeprefix("llm_policy_gen.") if module != "llm_policy_gen" else "."


def test_every_module_is_on_a_floor_and_every_entry_names_a_module() -> None:
    drawn = load_map()
    entries = floors(drawn)
    mods = modules()
    assert len(mods) > 150, f"only {len(mods)} modules read under {PKG}"
    assert sorted(m for m in mods if floor_of(m, entries) is None) == []
    assert len(entries) == sum(len(f["modules"]) for f in drawn["floors"]), "an entry is on two floors"
    later = {f"llm_policy_gen.{e}" for e in drawn.get("not_yet", [])}
    assert sorted(e for e in entries if e not in mods and e not in later) == []
    assert floor_of("llm_policy_gen.suites.runner", entries) == len(drawn["floors"]) - 1  # benchmarks: the top floor


def test_no_import_runs_up_a_floor_but_the_few_the_map_allows() -> None:
    drawn = load_map()
    entries = floors(drawn)
    found = edges()
    assert len(found) > 1000 and {e.how for e in found} == {"import", "string"}, "the scan read almost nothing"
    allowed = {(f"llm_policy_gen.{u['from']}", f"llm_policy_gen.{u['to']}") for u in drawn.get("up", [])}
    assert len(allowed) <= MAX_UP, f"{len(allowed)} imports allowed up a floor; at most {MAX_UP}"
    up = going_up(found, entries)
    broken = sorted({f"{_short(e.source)}:{e.line} -> {_short(e.target)} ({e.how})" for e in up
                     if (e.source, e.target) not in allowed})
    assert broken == []
    assert {(e.source, e.target) for e in up} == allowed, "an allowed import that no longer exists: remove it"


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    pkg = tmp_path / "llm_policy_gen"
    for rel, text in {"__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_text(text, encoding="utf-8")
    return pkg


def test_the_scan_finds_every_kind_of_import(tmp_path: Path) -> None:
    """A function's import, a TYPE_CHECKING one, a registry's entry point, a ``module:attribute`` registry name and
    a relative string given to import_module all count; a docstring naming a module does not."""
    pkg = _package(tmp_path, {
        "low/__init__.py": "", "high/__init__.py": "", "high/a.py": "X = 1\n", "high/b.py": "X = 1\n",
        "high/c.py": "X = 1\n", "high/d.py": "X = 1\n", "high/e.py": "X = 1\n", "high/f.py": "X = 1\n",
        "low/m.py": (
            '"""llm_policy_gen.high.f"""\n'
            "from typing import TYPE_CHECKING\n"
            "from importlib import import_module\n"
            "if TYPE_CHECKING:\n"
            "    from ..high import a\n"
            "def f():\n"
            "    from ..high.b import X\n"
            "    return X\n"
            'ENTRY = "llm_policy_gen.high.c:Thing"\n'
            'NAMES = "llm_policy_gen.high.d"\n'
            'WHERE = {"e": "..high.e"}\n'
            "def g(name):\n"
            "    return import_module(WHERE[name], __package__)\n"),
    })
    found = {(e.target.removeprefix("llm_policy_gen."), e.how) for e in edges(pkg) if e.source.endswith("low.m")}
    assert found == {("high.a", "import"), ("high.b", "import"), ("high.c", "string"), ("high.d", "string"),
                     ("high.e", "string")}


def test_an_import_up_a_floor_is_found(tmp_path: Path) -> None:
    pkg = _package(tmp_path, {"low.py": "def f():\n    from .high import X\n",
                              "high.py": "from .low import f\nX = 1\n"})
    entries = floors({"floors": [{"modules": ["low"]}, {"modules": ["high", "."]}]})
    up = going_up(edges(pkg), entries)
    assert [(e.source, e.target, e.line) for e in up] == [("llm_policy_gen.low", "llm_policy_gen.high", 2)]
