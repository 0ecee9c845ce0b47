"""The shell blocks of the README and the docs run as written.

**The marker.** A fenced ```` ```bash ```` block right after a line ``<!-- runnable -->`` (invisible on GitHub and on
the site) is one a fresh machine runs after ``make run``: no key, no network, no GPU, nothing the page has not made
before (no ``<run-id>`` to fill in). Mark a block only when that holds; every other block is read, not run.

**How a block runs here.** Each marked block runs as one ``bash -euo pipefail`` script in an empty temporary folder
that holds what a clone has after ``make run``: ``.venv/bin/llm-policy-gen`` and ``.venv/bin/python`` (two-line shims
onto this interpreter, with this checkout first on ``PYTHONPATH``) and copies of ``tools/`` and ``paper/``. ``HOME`` is
another temporary folder (no cache, model or ``.env`` of yours), and no provider key or base URL is passed on.

**Small budgets.** Before it runs, the block's budgets are capped (:data:`CAPS`): ``--iterations`` at 2,
``--max-episodes`` at 200, ``--episodes`` and ``--heldout-episodes`` at 20, ``--seeds A-B`` at two seeds; a page may
show a larger figure, the test runs the same commands smaller. All the blocks together take well under a minute of
CPU.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = "<!-- runnable -->"

CAPS: list[tuple[re.Pattern[str], int]] = [
    (re.compile(r"(--iterations[ =])(\d+)"), 2),
    (re.compile(r"(--max-episodes[ =])(\d+)"), 200),
    (re.compile(r"(--(?:heldout-)?episodes[ =])(\d+)"), 20),
]
"""Flag patterns and the most each may ask for in this test."""
_SEEDS = re.compile(r"(--seeds[ =])(\d+)-(\d+)")
_SECRETS = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL",
            "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The line of the opening fence, 1-based."""
    info: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[tuple[Block, bool]]:
    """Every fenced block of ``page`` and whether the marker stands right before it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            marked = i > 0 and lines[i - 1].strip() == MARKER
            out.append((Block(page, i + 1, lines[i][3:].strip(), "\n".join(lines[i + 1:end])), marked))
            i = end + 1
        else:
            i += 1
    return out


def runnable() -> list[Block]:
    return [b for page in PAGES for b, marked in blocks(page) if marked]


def shrink(text: str) -> str:
    """``text`` with its budgets capped (see the module docstring)."""
    for pattern, most in CAPS:
        text = pattern.sub(lambda m, most=most: f"{m.group(1)}{min(int(m.group(2)), most)}", text)
    return _SEEDS.sub(lambda m: f"{m.group(1)}{m.group(2)}-{min(int(m.group(3)), int(m.group(2)) + 1)}", text)


def workdir(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A folder as a clone after ``make run`` has it, and the environment a block runs in."""
    work = tmp / "work"
    (work / ".venv" / "bin").mkdir(parents=True)
    for name, args in (("python", ""), ("llm-policy-gen", " -m llm_policy_gen")):
        shim = work / ".venv" / "bin" / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}"{args} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    shutil.copytree(ROOT / "tools", work / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (work / "paper").mkdir()
    shutil.copyfile(ROOT / "paper" / "main.tex", work / "paper" / "main.tex")
    env = {k: v for k, v in os.environ.items() if k not in _SECRETS}
    env.update(HOME=str(tmp / "home"), PYTHONPATH=str(ROOT), MPLBACKEND="Agg", LLM_POLICY_GEN_NO_DOTENV="1")
    (tmp / "home").mkdir()
    return work, env


def test_the_pages_mark_runnable_blocks_and_only_bash_ones() -> None:
    found = runnable()
    pages = {b.page.name for b in found}
    assert {"README.md", "getting-started.md", "experiments.md"} <= pages, pages
    assert all(b.info == "bash" for b in found), [b.name for b in found if b.info != "bash"]


def test_shell_blocks_call_the_venv_as_every_page_does() -> None:
    """A command line in a ``bash`` block (or one without a language) starts ``.venv/bin/...`` (nothing needs an
    activated venv), not a bare ``llm-policy-gen COMMAND`` or a ``python`` that may lack the package; a line of output
    (``llm-policy-gen train: error: ...``) is not a command."""
    bare = re.compile(r"^(llm-policy-gen [a-z]+(\s|$)|python (bench|agents)/)")
    wrong = [f"{b.name}: {line}" for page in PAGES for b, _ in blocks(page) if b.info in ("bash", "")
             for line in b.text.splitlines() if bare.match(line)]
    assert not wrong, wrong


def test_every_page_of_the_site_is_in_the_readmes_read_on_table() -> None:
    nav = re.findall(r":\s*([\w/-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Read on"):]
    missing = [page for page in nav if page != "index.md" and f"(docs/{page})" not in table]
    assert not missing, missing
    assert "--mode lm-policy" in readme[:readme.index("## Read on")]


def test_shrink_caps_budgets_and_keeps_the_rest() -> None:
    line = "train --iterations 30 --max-episodes 3000 --episodes 100 --heldout-episodes 10 --seeds 0-9 --seed 7"
    assert shrink(line) == ("train --iterations 2 --max-episodes 200 --episodes 20 --heldout-episodes 10 "
                            "--seeds 0-1 --seed 7")


@pytest.mark.slow
@pytest.mark.parametrize("block", runnable(), ids=lambda b: b.name)
def test_a_runnable_block_runs_as_written(block: Block, tmp_path: Path) -> None:
    work, env = workdir(tmp_path)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", shrink(block.text)], cwd=work, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{block.name} exit {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"


def test_the_reports_page_asks_for_what_report_needs_only() -> None:
    """The install line before the first `report` command asks for the `report` extra alone (Jinja2), not for extras
    other commands need."""
    lines = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8").splitlines()
    first = next(i for i, line in enumerate(lines) if "llm-policy-gen report " in line)
    install = [line for line in lines[:first] if "pip install" in line][-1]
    assert re.search(r"install -e '\.\[report\]'", install), install
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'report = ["jinja2>=3.1"]' in pyproject


def test_make_paper_installs_the_package_alone() -> None:
    """tools/paper.py needs the package only: `make paper` takes the run install, not the dev one (every dev extra,
    peers, lm-policy and a llama-cpp-python build), and `make help` says what it installs."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    rule = re.search(r"^paper: (.*)$", makefile, re.M)
    assert rule is not None and rule.group(1).split() == ["$(STAMP_RUN)"], rule
    assert re.search(r'echo "make paper - install the package \(no extras\)', makefile)
