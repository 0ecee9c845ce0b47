"""Every published figure comes from a committed record (issue 61 item 3): the README's results block, the suite
blocks of docs/results.md and the CSV and LaTeX tables under docs/tables are regenerated from
``llm_policy_gen/suites/data/*/records.jsonl`` and must equal the committed pages (PNGs and docs/results-history.md,
"transcribed, no record", are exempt). After changing records or the renderer: ``python tools/render_pages.py``."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from llm_policy_gen.suites.pages import fill_block, generated_pages, stale_pages

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def pages() -> dict[str, str]:
    made, _ = generated_pages(ROOT)
    return {path.relative_to(ROOT).as_posix(): text for path, text in made.items()}


def test_every_generated_page_equals_what_the_committed_records_give(pages: dict[str, str]) -> None:
    assert {"README.md", "docs/results.md", "docs/tables/goals.csv", "docs/tables/goals_seeds.csv",
            "docs/tables/goals.tex"} <= set(pages)
    assert not any(p.endswith(".png") or p == "docs/results-history.md" for p in pages)
    assert stale_pages(ROOT, pages) == [], "run: python tools/render_pages.py"


def test_a_figure_edited_by_hand_in_the_readme_block_fails(pages: dict[str, str], tmp_path: Path) -> None:
    for rel in pages:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    assert stale_pages(tmp_path, pages) == []
    readme = tmp_path / "README.md"
    text = readme.read_text(encoding="utf-8")
    block = text[text.index("<!-- results:begin"):text.index("<!-- results:end -->")]
    figure = re.search(r"\| CartPole-v1 \| [^|]+\| [^|]+\| (\d[\d,.]*) ", block)
    assert figure is not None
    edited = block.replace(f"| {figure.group(1)} ", "| 499.9 ", 1)
    assert edited != block
    readme.write_text(text.replace(block, edited), encoding="utf-8")
    assert stale_pages(tmp_path, pages) == ["README.md"]


def test_the_readme_results_are_one_table_of_about_forty_lines(pages: dict[str, str]) -> None:
    text = pages["README.md"]
    block = text[text.index("<!-- results:begin"):text.index("<!-- results:end -->")]
    lines = block.splitlines()
    assert len(lines) <= 45
    assert "| task | goal | gymnasium threshold | `offline` | PPO, zoo budget | PPO at offline's steps | LM policy |" \
        in block
    assert sum(line.startswith("| ") for line in lines) == 1 + 18  # the header and one row per goal task
    assert "![" in block and "Coverage:" in block


def test_a_page_without_its_block_is_refused_in_one_line() -> None:
    from llm_policy_gen.errors import UserError

    with pytest.raises(UserError, match="no <!-- goals:begin --> ... <!-- goals:end --> block"):
        fill_block("no markers here\n", "goals", "x\n", "docs/results.md")
