"""The paper's generated tables and figures come from a comparison directory; LLM rows need real calls.

The builder is a script beside the package, ``tools/paper.py`` (what ``make paper`` runs): these tests load it from
its file, and one runs it as ``make`` does."""

from __future__ import annotations

import csv
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from llm_policy_gen.commands.compare import CompareConfig, run_compare
from llm_policy_gen.sweep.results import CSV_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "paper.py"


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paper", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


paper = _load_script()


@pytest.fixture(scope="module")
def comparison(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cmp")
    run_compare(CompareConfig("FrozenLake-v1", ["offline", "random", "offline@advisor"], [0, 1], out,
                              {"iterations": 2, "heldout_episodes": 10, "train_episodes": 2}, progress=False))
    return out


def paper_dir(tmp_path: Path) -> Path:
    out = tmp_path / "paper"
    out.mkdir()
    shutil.copyfile(ROOT / "paper" / "main.tex", out / "main.tex")
    return out


def test_generated_files_hold_the_comparison_numbers(comparison: Path, tmp_path: Path) -> None:
    out = paper_dir(tmp_path)
    written = {p.name for p in paper.generate(comparison, out)}
    assert {"numbers.tex", "results_table.tex", "ranking.tex", "llm_status.tex", "failed.tex", "curves.png",
            "policy.png", "policy_caption.tex"} <= written
    gen = out / "generated"
    numbers = (gen / "numbers.tex").read_text()
    assert r"\newcommand{\EnvId}{FrozenLake-v1}" in numbers and r"\newcommand{\NSeeds}{2}" in numbers
    assert r"\newcommand{\Iterations}{2}" in numbers and r"\newcommand{\HeldoutEpisodes}{10}" in numbers
    assert r"\newcommand{\NStates}{16}" in numbers and r"\newcommand{\NActions}{4}" in numbers
    table = (gen / "results_table.tex").read_text()
    with open(comparison / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert "runs & episodes/run & steps/run & IQM held-out return" in table

    def counted(backend: str) -> str:  # the table's episodes/run and steps/run cells: means over the seeds
        mine = [r for r in rows if r["backend"] == backend]
        episodes, steps = (sum(int(r[k]) for r in mine) / len(mine) for k in ("episodes_total", "env_steps_total"))
        return f"{episodes:,.0f} & {steps:,.0f}".replace(",", "{,}")

    offline = [float(r["best_eval_mean"]) for r in rows if r["backend"] == "offline"]
    assert f"offline & table & no & 2/2 & {counted('offline')} & {sum(offline) / 2:,.1f} [" in table
    assert f"random & table & no & 2/2 & {counted('random')} & " in table
    advised = [float(r["best_eval_mean"]) for r in rows if r["backend"] == "offline@advisor"]
    assert all(r["mode"] == "advisor" for r in rows if r["backend"] == "offline@advisor")
    assert f"offline & advisor & no & 2/2 & {counted('offline@advisor')} & {sum(advised) / 2:,.1f} [" in table
    means = [sum(int(r["env_steps_total"]) for r in rows if r["backend"] == b) / 2
             for b in ("offline", "random", "offline@advisor")]
    unequal = max(means) > 1.1 * min(means)  # the ranking says so when the table compares unequal experience
    assert (r"\textbf{Warning}: unequal interaction" in (gen / "ranking.tex").read_text()) == unequal
    assert r"\newcommand{\Modes}{table, advisor}" in numbers and r"\newcommand{\AdviceProb}{0.5}" in numbers
    assert "No language-model backend is reported" in (gen / "llm_status.tex").read_text()
    assert "Ordered by the interquartile mean of the final held-out return" in (gen / "ranking.tex").read_text()
    assert (gen / "policy.png").read_bytes()[:4] == b"\x89PNG"


def test_llm_rows_need_real_non_cached_calls(comparison: Path, tmp_path: Path) -> None:
    cmp = tmp_path / "cmp"
    shutil.copytree(comparison, cmp)
    src = cmp / "runs" / "FrozenLake-v1" / "offline_s0"
    with open(cmp / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for name, cached, tokens in (("openai-cached", True, 120), ("openai-real", False, 120)):
        d = src.parent / f"{name}_s0"
        shutil.copytree(src, d)
        (d / "transcripts.jsonl").write_text(json.dumps(
            {"iteration": 1, "response_text": "{}", "cached": cached, "input_tokens": tokens,
             "output_tokens": 10}) + "\n")
        rows.append({**rows[0], "backend": f"openai:{name}", "method": f"openai:{name}", "is_llm": "true",
                     "run_dir": str(d.relative_to(cmp))})
    with open(cmp / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    meta = json.loads((cmp / "compare.json").read_text())
    meta["backends"] += ["openai:openai-cached", "openai:openai-real"]
    (cmp / "compare.json").write_text(json.dumps(meta))

    assert not paper.has_real_calls(src) and not paper.has_real_calls(src.parent / "openai-cached_s0")
    assert paper.has_real_calls(src.parent / "openai-real_s0")
    out = paper_dir(tmp_path)
    paper.generate(cmp, out)
    table = (out / "generated" / "results_table.tex").read_text()
    assert "openai:openai-real & table & yes" in table and "openai-cached" not in table
    status = (out / "generated" / "llm_status.tex").read_text()
    assert "openai:openai-real" in status and "Left out" in status and "openai:openai-cached seed 0" in status


def test_without_pdflatex_it_stops_after_the_generated_files(comparison: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(paper.shutil, "which", lambda _name: None)
    out = paper_dir(tmp_path)
    assert paper.main(["--compare-dir", str(comparison), "--out", str(out)]) == 0
    assert "pdflatex is not installed: stopped after the generated tables and figures" in capsys.readouterr().err
    assert (out / "generated" / "results_table.tex").is_file() and not (out / "main.pdf").exists()


def test_the_script_runs_as_make_paper_runs_it(comparison: Path, tmp_path: Path) -> None:
    out = paper_dir(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--compare-dir", str(comparison), "--out", str(out),
                           "--no-pdf"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"wrote {out / 'generated' / 'numbers.tex'}" in proc.stdout


def test_missing_comparison_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert paper.main(["--compare-dir", str(tmp_path / "none"), "--out", str(tmp_path)]) == 2
    assert "not a comparison directory" in capsys.readouterr().err


def test_latex_escape() -> None:
    assert paper.latex_escape("a_b & 50% $x #1 {y} ~ ^ \\") == (
        r"a\_b \& 50\% \$x \#1 \{y\} \textasciitilde{} \^{} \textbackslash{}")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("pdflatex") is None, reason="pdflatex is not installed")
def test_pdf_builds(comparison: Path, tmp_path: Path) -> None:
    out = paper_dir(tmp_path)
    assert paper.main(["--compare-dir", str(comparison), "--out", str(out)]) == 0
    pdf = out / "main.pdf"
    assert pdf.is_file() and pdf.read_bytes()[:5] == b"%PDF-"


def test_rows_naming_a_folder_outside_the_comparison_are_left_out(comparison: Path, tmp_path: Path) -> None:
    cmp = tmp_path / "cmp"
    shutil.copytree(comparison, cmp)
    outside = tmp_path / "elsewhere"
    shutil.copytree(cmp / "runs" / "FrozenLake-v1" / "offline_s0", outside)
    (outside / "config.json").write_text(json.dumps({**json.loads((outside / "config.json").read_text()),
                                                     "env_spec": "planted"}))
    with open(cmp / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    rows.append({**rows[0], "backend": "offline", "seed": "7", "run_dir": "../elsewhere"})
    rows.append({**rows[0], "backend": "offline", "seed": "8", "run_dir": str(outside)})
    with open(cmp / "results.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(CSV_COLUMNS))
        w.writeheader()
        w.writerows(rows)
    kept = paper.inside_rows(cmp, paper.read_results(cmp / "results.csv"))
    assert {r.seed for r in kept if r.backend == "offline"} == {0, 1}
    paper.generate(cmp, paper_dir(tmp_path))  # the planted config.json is never read


def test_out_elsewhere_gets_the_paper_text_and_builds(comparison: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out OTHER_DIR` (no main.tex there) copies the shipped paper/main.tex in and builds the PDF there (a stand-in
    pdflatex, so that the test needs no TeX); a main.tex already in OUT is the user's and is never overwritten."""
    fake = tmp_path / "bin" / "pdflatex"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\ntest -f main.tex && mkdir -p build && printf "%%PDF-fake" > build/main.pdf\n')
    fake.chmod(0o755)
    monkeypatch.setattr(paper.shutil, "which", lambda _name: str(fake))
    out = tmp_path / "elsewhere" / "my-paper"
    assert paper.main(["--compare-dir", str(comparison), "--out", str(out)]) == 0
    assert (out / "main.tex").read_bytes() == (ROOT / "paper" / "main.tex").read_bytes()
    assert (out / "main.pdf").read_bytes() == b"%PDF-fake" and (out / "generated" / "numbers.tex").is_file()
    (out / "main.tex").write_text("my own text")
    assert paper.main(["--compare-dir", str(comparison), "--out", str(out), "--no-pdf"]) == 0
    assert (out / "main.tex").read_text() == "my own text"
