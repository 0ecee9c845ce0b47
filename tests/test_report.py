"""``llm-policy-gen report``: the page as a person sees it (headless Chromium), old run directories, bad input."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.tables import TableResponder, out_of_range_answer
from run_helpers import cfg, quiet

from llm_policy_gen.cli import main
from llm_policy_gen.commands.compare import CompareConfig, run_compare
from llm_policy_gen.envs import get_spec
from llm_policy_gen.report import write_report
from llm_policy_gen.run import train
from llm_policy_gen.run.files import RunDir
from llm_policy_gen.storage.runlog import read_jsonl, write_json_atomic
from llm_policy_gen.sweep.results import backend_stats, read_results

fake_openai = openai_server.fake_openai

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=10000")


# ---------------------------------------------------------------------------------------------------- helpers
def offline_run(tmp_path: Path, **kw: Any) -> Path:
    base: dict[str, Any] = dict(env_id="CartPole-v1", candidates=3, heldout_episodes=20, cache=True)
    return train(cfg(tmp_path / "logs", **{**base, **kw}), log=quiet).run_dir


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no Chromium on this machine, so the report is not rendered in a browser: `make browser` (as root, "
                "with apt-get) installs Debian's chromium; .ci/run does")


def browse(page: Path, tmp_path: Path, *args: str, fragment: str = "") -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    url = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
                          capture_output=True, text=True, timeout=120, check=True)


def rendered_dom(page: Path, tmp_path: Path, fragment: str = "") -> str:
    """The DOM after the page's script ran, as Chromium serialises it."""
    return browse(page, tmp_path, "--dump-dom", fragment=fragment).stdout


def assert_screenshot_shows_a_page(page: Path, tmp_path: Path) -> None:
    from PIL import Image

    shot = tmp_path / f"{page.stem}.png"
    browse(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,1400")
    image = Image.open(shot).convert("L")
    levels = image.histogram()  # pixels per grey level, 0 (black) to 255 (white)
    dark = sum(levels[:128]) / sum(levels)
    assert image.size == (1280, 1400)
    assert dark > 0.01 and sum(n > 0 for n in levels) > 32, f"the screenshot looks blank ({dark:.2%} dark pixels)"


class _Elements(HTMLParser):
    """Text content of the elements that carry a given attribute value."""

    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self, attr: str, value: str | None) -> None:
        super().__init__()
        self.attr, self.value = attr, value
        self.stack: list[list[str] | None] = []
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.VOID:
            return
        hit = any(k == self.attr and (self.value is None or v == self.value) for k, v in attrs)
        self.stack.append([] if hit else None)

    def handle_endtag(self, tag: str) -> None:
        if tag in self.VOID or not self.stack:
            return
        parts = self.stack.pop()
        if parts is not None:
            text = " ".join("".join(parts).split())
            self.found.append(text)
            for outer in self.stack:
                if outer is not None:
                    outer.append(text)

    def handle_data(self, data: str) -> None:
        for parts in self.stack:
            if parts is not None:
                parts.append(data)


def texts(html: str, attr: str, value: str | None = None) -> list[str]:
    parser = _Elements(attr, value)
    parser.feed(html)
    return parser.found


def write_version1_run(run_dir: Path) -> dict[str, Any]:
    """A run directory as llm-policy-gen wrote it before K candidates (file version 1): one candidate per
    iteration, best_eval_mean = the test mean, heldout_mean = the held-out mean, no checkpoint, no confirmation."""
    spec = get_spec("CartPole-v1")
    obs, acts = spec.observation_discretizer(), spec.action_discretizer()
    (run_dir / "policies").mkdir(parents=True)
    write_json_atomic(run_dir / "config.json", {
        "package": "llm-policy-gen", "version": "0.1.0", "seed": 0, "output_format": "table",
        "config": {"env_id": "CartPole-v1", "backend": "offline", "iterations": 3, "seed": 0, "heldout_episodes": 100,
                   "mode": "table", "repair_attempts": 2, "explicit": ["backend", "env_id", "iterations"]},
        "env_spec": spec.to_dict(), "backend": {"provider": "offline", "is_llm": False}, "backend_is_llm": False,
        "seeds": {"test": 10000, "train": 20000, "heldout": 50000},
    })
    rows = [(1, 229.0, 229.0, 200.3, True, 10, 790), (2, 141.5, 206.75, 200.3, False, 19, 2136),
            (3, 382.2, 382.2, 317.56, True, 29, 5112)]
    with open(run_dir / "events.jsonl", "w", encoding="utf-8") as fh:
        for it, eval_mean, best, held, accepted, episodes, steps in rows:
            fh.write(json.dumps({
                "iteration": it, "train_return": 18.75, "train_returns": [17.0, 27.0, 10.0, 21.0],
                "train_epsilon": 1.0, "eval_mean": eval_mean, "eval_returns": [eval_mean] * 3, "eval_episodes": 2 + it,
                "best_eval_mean": best, "heldout_mean": held, "accepted": accepted, "valid": True, "n_changed": 22,
                "episodes_total": episodes, "env_steps_total": steps, "heldout_episodes_total": 300,
                "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "input_tokens_total": 0,
                "output_tokens_total": 0, "cost_usd_total": 0.0, "llm_calls": 1, "validation_errors": [],
                "notes": [], "prompt_chars": 6303, "wall_s": 0.17}) + "\n")
    with open(run_dir / "transcripts.jsonl", "w", encoding="utf-8") as fh:
        for it in (1, 2, 3):
            fh.write(json.dumps({
                "iteration": it, "attempt": 1, "backend": "offline", "model": "",
                "messages": [{"role": "system", "content": "You write tabular control policies."},
                             {"role": "user", "content": f"# Task: CartPole\niteration {it}\n" + "x" * 900}],
                "prompt_chars": 940, "response_text": '{"rows": []}', "input_tokens": 0, "output_tokens": 0,
                "latency_s": 0.0004, "cached": False, "valid": True, "errors": [], "notes": [], "cost_usd": 0.0})
                + "\n")
    write_json_atomic(run_dir / "best_policy.json", {
        "format_version": 1, "env_id": "CartPole-v1", "observation": obs.to_spec(), "action": acts.to_spec(),
        "n_states": obs.n_states, "n_actions": acts.n_actions, "table": spec.default_table().tolist(),
        "meta": {"iteration": 3, "eval_mean": 382.2, "heldout_mean": 317.56}})
    summary = {"env_id": "CartPole-v1", "backend": "offline", "model": "", "is_llm": False, "seed": 0,
               "best_eval_mean": 317.56, "best_eval_std": 137.79, "best_eval_episodes": 100, "best_iteration": 3,
               "reward_threshold": 475.0, "solved": False, "episodes_to_solve": None, "iteration_solved": None,
               "iterations": 3, "episodes_total": 29, "env_steps_total": 5112, "heldout_episodes_total": 300,
               "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "cost_complete": True, "llm_calls": 3,
               "cached_calls": 0, "invalid_iterations": 0, "stop_reason": "iterations done", "wall_s": 0.526}
    write_json_atomic(run_dir / "summary.json", summary)
    return summary


# ---------------------------------------------------------------------------------------------------- in a browser
@pytest.mark.slow
def test_run_report_in_chromium_shows_the_held_out_mean_and_every_call(tmp_path: Path) -> None:
    chromium()
    run = offline_run(tmp_path)
    summary = json.loads((run / "summary.json").read_text())
    assert main(["report", str(run), "--out", str(tmp_path / "run.html")]) == 0
    page = tmp_path / "run.html"
    assert_screenshot_shows_a_page(page, tmp_path)

    dom = rendered_dom(page, tmp_path)
    assert 'data-texts="ready"' in dom  # the script unpacked the stored texts
    (held,) = texts(dom, "data-key", "best_eval_mean")
    assert f"{summary['best_eval_mean']:,.2f}" in held and "held-out" in held
    (test,) = texts(dom, "data-key", "best_test_mean")
    assert f"{summary['best_test_mean']:,.2f}" in test
    rows = texts(dom, "data-iteration")
    assert len(rows) == 3
    events = read_jsonl(run / "events.jsonl")
    for row, ev in zip(rows, events, strict=True):
        assert all(f"{m:,.1f}" in row for m in ev["candidate_means"])
    assert len(texts(dom, "class", "call valid")) == 9  # 3 iterations x 3 candidates

    # A link to one call opens it and fills in its prompt and answer.
    first = RunDir(run).load_transcripts()[4]  # the package's reader: an offline run's lines are packed
    anchor = f"call-{first['iteration']}-{first['candidate']}-{first['attempt']}"
    linked = rendered_dom(page, tmp_path, fragment=anchor)
    (call,) = texts(linked, "id", anchor)
    assert first["messages"][1]["content"].splitlines()[0] in call
    assert first["response_text"][:60] in call


@pytest.mark.slow
def test_comparison_report_in_chromium_has_every_backends_row(tmp_path: Path) -> None:
    chromium()
    out = tmp_path / "cmp"
    run_compare(CompareConfig("CartPole-v1", ["offline", "random"], [0, 1], out,
                              {"iterations": 2, "candidates": 2, "heldout_episodes": 20, "plots": False},
                              progress=False))
    assert main(["report", str(out), "--run-reports"]) == 0
    page = out / "report.html"
    assert_screenshot_shows_a_page(page, tmp_path)
    dom = rendered_dom(page, tmp_path)
    stats = {s.backend: s for s in backend_stats(read_results(out / "results.csv"))}
    for backend in ("offline", "random"):
        results_row, *run_rows = texts(dom, "data-backend", backend)
        assert backend in results_row and stats[backend].returns.format(1) in results_row
        assert len(run_rows) == 2 and all("run report" in r for r in run_rows)
    for run in (out / "runs" / "CartPole-v1").iterdir():
        assert (run / "report.html").is_file()  # --run-reports, linked from the page
        assert f'href="./runs/CartPole-v1/{run.name}/report.html"' in dom


# ---------------------------------------------------------------------------------------------------- the page
def test_page_loads_nothing_from_outside(tmp_path: Path) -> None:
    run = tmp_path / "CartPole-v1" / "old"
    write_version1_run(run)
    (page,) = write_report(run)
    html = page.read_text(encoding="utf-8")
    assert page == run / "report.html"
    assert "default-src 'none'" in html  # the browser itself refuses any request
    sources = re.findall(r'\s(?:src|href)="([^"]*)"', html)
    assert sources and all(s.startswith(("data:image/png;base64,", "#")) for s in sources), sources
    assert not re.search(r"<link\b|@import|url\(", html)


@pytest.mark.slow
def test_llm_calls_show_errors_tokens_cost_and_cache_hits(fake_openai: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    tables = TableResponder()
    answers = iter([out_of_range_answer()])

    def responder(body: dict[str, Any]) -> str:
        return next(answers, None) or tables(body)

    fake_openai.responder = responder
    args = ["train", "--env", "CartPole-v1", "--backend", "openai:gpt-4.1-mini", "--logs-dir", str(tmp_path / "logs"),
            "--iterations", "2", "--candidates", "2", "--heldout-episodes", "20", "--no-plots", "--quiet"]
    assert main([*args, "--run-id", "first"]) == 0
    assert main([*args, "--run-id", "again"]) == 0  # the same calls: answered from the cache
    first, again = (tmp_path / "logs" / "CartPole-v1" / name for name in ("first", "again"))

    html = write_report(first)[0].read_text(encoding="utf-8")
    invalid = texts(html, "class", "call invalid")
    assert len(invalid) == 1 and "state" in invalid[0] and "324" in invalid[0]
    (errors,) = texts(html, "class", "errors")
    assert errors in invalid[0]  # the validation error is written out, in the highlighted list
    summary = json.loads((first / "summary.json").read_text())
    (tokens,) = [t for t in texts(html, "class", "card ") if "tokens in / out" in t]
    assert f"{summary['input_tokens']:,} / {summary['output_tokens']:,}" in tokens
    assert f"${summary['cost_usd']:,.4f}" in " ".join(texts(html, "data-key", "cost_usd"))
    assert '<span class="badge llm">cache hit</span>' not in html

    cached = write_report(again)[0].read_text(encoding="utf-8")
    calls = len(read_jsonl(again / "transcripts.jsonl"))
    assert cached.count('<span class="badge llm">cache hit</span>') == calls


def test_a_run_directory_from_before_candidates_still_reports(tmp_path: Path) -> None:
    run = tmp_path / "CartPole-v1" / "old"
    summary = write_version1_run(run)
    assert main(["report", str(run), "--out", str(tmp_path / "old.html")]) == 0
    html = (tmp_path / "old.html").read_text(encoding="utf-8")
    assert "file version 1" in html
    (held,) = texts(html, "data-key", "best_eval_mean")
    (test,) = texts(html, "data-key", "best_test_mean")
    assert f"{summary['best_eval_mean']:.2f}" in held and "382.20" in test  # test mean: events' best_eval_mean
    rows = texts(html, "data-iteration")
    assert len(rows) == 3 and "#1 141.5" in rows[1] and "200.30" in rows[1]
    assert 'alt="the best table"' in html  # the version 1 policy file is drawn
    assert len(texts(html, "class", "call valid")) == 3


def test_an_unfinished_run_reports_its_last_iteration(tmp_path: Path) -> None:
    run = offline_run(tmp_path, iterations=2, candidates=2)
    last = read_jsonl(run / "events.jsonl")[-1]
    (run / "summary.json").unlink()
    html = write_report(run, tmp_path / "r.html")[0].read_text(encoding="utf-8")
    assert "unfinished" in html and "the run did not finish" in html
    (held,) = texts(html, "data-key", "best_eval_mean")
    assert f"{last['best_eval_mean']:,.2f}" in held


@pytest.mark.slow
def test_a_long_run_with_many_candidates_stays_a_small_page(tmp_path: Path) -> None:
    """100 iterations x 8 candidates of 12 kB prompts and 8 kB answers: the texts are stored once and packed."""
    run = tmp_path / "CartPole-v1" / "long"
    write_version1_run(run)
    events, calls = [], []
    table = json.dumps({"rationale": "r", "rows": [{"state": s, "action": s % 2} for s in range(324)]})
    for it in range(1, 101):
        means = [float((it * 7 + k * 13) % 500) for k in range(8)]
        events.append({"iteration": it, "candidate_means": means, "chosen": 1 + means.index(max(means)),
                       "best_test_mean": 400.0, "best_eval_mean": 390.0, "accepted": it % 10 == 0,
                       "episodes_total": 40 * it, "llm_calls": 8, "input_tokens": 8 * 3000, "output_tokens": 8 * 2500,
                       "cost_usd": 0.05, "validation_errors": []})
        prompt = "".join(f"# Section {s}\n" + f"iteration {it if s > 5 else 0} line\n" * 150 for s in range(8))
        for k in range(1, 9):
            calls.append({"iteration": it, "candidate": k, "attempt": 1, "valid": True, "errors": [],
                          "messages": [{"role": "system", "content": "You write tables. " * 30},
                                       {"role": "user", "content": prompt}],
                          "response_text": table.replace('"r"', f'"iteration {it} candidate {k}"'),
                          "input_tokens": 3000, "output_tokens": 2500, "cost_usd": 0.00625, "latency_s": 4.2})
    (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (run / "transcripts.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    raw = (run / "transcripts.jsonl").stat().st_size
    (page,) = write_report(run)
    size = page.stat().st_size
    assert size < 3_000_000 and size < raw / 5, f"{size:,} bytes for {raw:,} bytes of transcripts"
    assert page.read_text(encoding="utf-8").count('<article class="call') == 800


# ---------------------------------------------------------------------------------------------------- bad input
def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_not_a_run_or_comparison_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "file.txt").write_text("x")
    for target, words in ((tmp_path / "empty", "neither a run directory"), (tmp_path / "nope", "not a directory"),
                          (tmp_path / "file.txt", "not a directory")):
        assert main(["report", str(target)]) == 2
        line = _error_line(capsys)
        assert words in line and "Traceback" not in line


def test_an_unwritable_out_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "CartPole-v1" / "old"
    write_version1_run(run)
    (tmp_path / "blocker").write_text("a file where a folder should be")
    assert main(["report", str(run), "--out", str(tmp_path / "blocker" / "r.html")]) == 2
    # refused before the page is made: the folder is a file (issue 29 item 13 checks --out's folder first)
    assert f"the folder {str(tmp_path / 'blocker')!r} is not a folder" in _error_line(capsys)
    assert main(["report", str(run), "--out", str(tmp_path / "r.txt")]) == 2
    assert "ending in .html" in _error_line(capsys)
    assert main(["report", str(run), "--out", str(tmp_path)]) == 2
    assert "bad --out" in _error_line(capsys)


def test_missing_jinja2_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "CartPole-v1" / "old"
    write_version1_run(run)
    for name in [m for m in sys.modules if m == "jinja2" or m.startswith("jinja2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "jinja2", None)
    assert main(["report", str(run)]) == 2
    assert "pip install -e '.[report]'" in _error_line(capsys)  # as the README installs it
    assert not (run / "report.html").exists()
