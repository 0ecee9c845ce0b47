"""The package's size limits stay: no module over 400 lines, none importing 20 or more package modules.

An import counts once per module it names, wherever it is written (at the top, inside a function, under
``TYPE_CHECKING``); ``from X import name`` counts the submodule ``X.name`` when ``name`` is a module, else ``X``.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "llm_policy_gen"
MAX_LINES = 400
MAX_IMPORTS = 19


def _modules(root: Path) -> dict[str, Path]:
    mods = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = path
    return mods


def package_imports(root: Path = PKG) -> dict[str, set[str]]:
    """Module -> the modules of the package under ``root`` it imports directly (see the module doc)."""
    mods = _modules(root)
    top = root.name
    out: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for a in node.names:
                    found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base)
        out[name] = {m for m in found if m in mods and m != name and (m == top or m.startswith(top + "."))}
    return out


def test_no_module_is_over_400_lines():
    lines = {p.relative_to(PKG.parent).as_posix(): len(p.read_text(encoding="utf-8").splitlines())
             for p in PKG.rglob("*.py")}
    assert len(lines) > 100, f"only {len(lines)} modules read under {PKG}"
    assert {p: n for p, n in lines.items() if n > MAX_LINES} == {}


def test_no_module_imports_20_or_more_package_modules():
    counts = {m: len(targets) for m, targets in package_imports().items()}
    assert len(counts) > 100 and max(counts.values()) >= 10, "the import count read almost nothing"
    assert {m: n for m, n in counts.items() if n > MAX_IMPORTS} == {}


def test_the_count_follows_every_kind_of_import(tmp_path: Path):
    """Lazy and TYPE_CHECKING imports count; ``from . import mod`` names the submodule, ``from .mod import name``
    the module; a module counts once however often it is imported."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    for rel in ("__init__.py", "a.py", "b.py", "c.py", "sub/__init__.py", "sub/d.py"):
        (pkg / rel).write_text("X = 1\n", encoding="utf-8")
    (pkg / "sub" / "e.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from .. import a\n"            # a submodule: pkg.a
        "from ..b import X\n"           # a name: pkg.b
        "from . import d\n"             # pkg.sub.d
        "import pkg.b\n"                # pkg.b again: counted once
        "if TYPE_CHECKING:\n"
        "    from .. import X\n"        # a name of the package itself: pkg
        "def f():\n"
        "    from ..c import X\n"       # inside a function: pkg.c
        "    import os\n",              # not the package's
        encoding="utf-8")
    assert package_imports(pkg)["pkg.sub.e"] == {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.sub.d"}
