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


def test_the_old_scripts_published_figures_come_back_from_the_imported_records(pages: dict[str, str]) -> None:
    """What bench/suite.py and bench/peers.py published from the same records (the README of 2026-12-03)."""
    block = pages["README.md"]
    for row in ("| CartPole-v1 | >= 475 in 100 episodes | 475 | 499.3 [490.7, 500.0], 9/10 | "
                "500.0 [500.0, 500.0], 10/10 | 491.7 [392.5, 500.0], 7/10 |",
                "| MountainCar-v0 | >= -110 in 1,000 episodes | -110 | -107.8 [-111.7, -106.5], 7/10 | "
                "-114.7 [-118.0, -112.7], 1/10 | -133.4 [-136.7, -130.3], 0/10 |",
                "| Hopper-v5 | >= 1,000 in 3,000 episodes | 3,800 | 1,057.3 [937.3, 1,305.6], 8/10 |",
                "| Reacher-v5 | >= -8 in 2,000 episodes | -3.75 | -11.81 [-12.12, -11.40], 0/10 | - | - |"):
        assert row in block, row
    assert "`offline` meets 9 of 18 goals." in block
    table = pages["docs/results.md"]
    assert "| Pendulum-v1 | sac-at-offline | >= -160.0 | **yes** (10/10) | none | - | -143.3 [-146.5, -138.8] (n=10)" \
        in table


def test_render_pages_refuses_a_page_without_its_block_in_one_line_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_pages", ROOT / "tools" / "render_pages.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    store = tmp_path / "llm_policy_gen" / "suites" / "data" / "goals"
    shutil.copytree(ROOT / "llm_policy_gen" / "suites" / "data" / "goals", store)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "results.md").write_text("# Results\n\nno block\n", encoding="utf-8")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert tool.main(["--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "no <!-- goals:begin --> ... <!-- goals:end --> block" in err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before
