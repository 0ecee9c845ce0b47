"""Budgets of counted interaction: ``train --max-steps`` stops at the first iteration boundary at or past it and says
by how much it went past; ``compare --max-steps`` runs its backends at about equal steps, its tables show the episodes
and steps of each backend, its curves end where the runs ended, and a table of unequal interaction says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.plotting.curves import curves_figure
from llm_policy_gen.plotting.stats import step_curves
from llm_policy_gen.report import write_report
from llm_policy_gen.storage.runlog import read_jsonl
from llm_policy_gen.sweep.results import read_results

#: A small CartPole run: one candidate on 3 test seeds, no confirmation, 5 held-out episodes.
SMALL = ["--candidates", "1", "--train-episodes", "2", "--test-max", "3", "--confirm-episodes", "0",
         "--heldout-episodes", "5", "--no-plots", "--no-progress"]
#: The same settings for ``compare`` (a TOML file).
SMALL_TOML = ("candidates = 1\ntrain-episodes = 2\ntest-max = 3\nconfirm-episodes = 0\nheldout-episodes = 5\n"
              "plots = false\n")


def train(tmp_path: Path, *args: str) -> int:
    return main(["train", "--env", "CartPole-v1", "--backend", "offline", "--seed", "0", "--logs-dir",
                 str(tmp_path / "logs"), "--run-id", "run", *SMALL, *args])


def files_of(run: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def test_train_stops_at_the_first_iteration_boundary_past_the_step_budget(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert train(tmp_path, "--iterations", "200", "--max-steps", "1500") == 0
    out = capsys.readouterr().out
    run = tmp_path / "logs" / "CartPole-v1" / "run"
    events = read_jsonl(run / "events.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    steps = summary["env_steps_total"]
    assert events[-2]["env_steps_total"] < 1500 <= events[-1]["env_steps_total"] == steps  # the first boundary
    assert summary["iterations"] == len(events) < 200
    assert summary["stop_reason"] == f"step budget reached ({steps} >= 1500: {steps - 1500} past it)"
    assert (summary["max_steps"], summary["steps_past_budget"]) == (1500, steps - 1500)
    assert (summary["max_episodes"], summary["episodes_past_budget"]) == (None, None)
    assert f"({steps} steps)" in out and f"stop: step budget reached ({steps} >= 1500" in out
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["max_steps"] == 1500


def test_a_run_at_its_budget_resumes_only_with_a_larger_one(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert train(tmp_path, "--iterations", "200", "--max-steps", "800") == 0
    run = tmp_path / "logs" / "CartPole-v1" / "run"
    before = files_of(run)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "already finished (step budget reached" in err and "give a larger --max-steps to extend it" in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert files_of(run) == before  # a refused resume changes no file

    larger = json.loads((run / "summary.json").read_text())["env_steps_total"] + 1
    assert main(["train", "--resume", str(run), "--max-steps", str(larger), "--no-progress"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    events = read_jsonl(run / "events.jsonl")
    assert events[-2]["env_steps_total"] < larger <= summary["env_steps_total"] == events[-1]["env_steps_total"]
    assert summary["stop_reason"].startswith("step budget reached") and summary["max_steps"] == larger


def test_an_old_config_without_a_step_budget_resumes_without_one(tmp_path: Path) -> None:
    assert train(tmp_path, "--iterations", "2") == 0
    run = tmp_path / "logs" / "CartPole-v1" / "run"
    config = json.loads((run / "config.json").read_text())
    del config["config"]["max_steps"]  # as a run of an earlier version wrote it
    (run / "config.json").write_text(json.dumps(config))
    assert main(["train", "--resume", str(run), "--iterations", "3", "--no-progress"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["iterations"] == 3 and summary["stop_reason"] == "iterations done"
    assert summary["max_steps"] is None and summary["steps_past_budget"] is None


@pytest.mark.parametrize("value", ["0", "-5", "1.5"])
def test_a_bad_step_budget_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert train(tmp_path, "--max-steps", value) == 2
    err = capsys.readouterr().err
    assert "--max-steps" in err and err.count("\n") == 1
    assert not (tmp_path / "logs").exists()
    assert main(["compare", "--env", "CartPole-v1", "--backends", "offline", "--seeds", "0", "--max-steps", value,
                 "--out", str(tmp_path / "cmp")]) == 2
    assert "--max-steps" in capsys.readouterr().err and not (tmp_path / "cmp").exists()


def compare(tmp_path: Path, out: Path, *args: str) -> int:
    config = tmp_path / "small.toml"
    config.write_text(SMALL_TOML)
    return main(["compare", "--env", "CartPole-v1", "--backends", "offline,q-learning", "--seeds", "0-1",
                 "--config", str(config), "--out", str(out), "--no-progress", *args])


@pytest.fixture(scope="module")
def budgeted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A comparison at --max-steps 3000 (iterations enough for the budget to end every run): its folder, stdout and
    stderr."""
    tmp = tmp_path_factory.mktemp("budgeted")
    capture = _Capture()
    with capture:
        assert compare(tmp, tmp / "cmp", "--iterations", "500", "--max-steps", "3000") == 0
    return tmp / "cmp", capture.out, capture.err


class _Capture:
    """stdout and stderr of a call (a module-scoped fixture cannot take capsys)."""

    def __enter__(self) -> None:
        import contextlib
        import io

        self._out, self._err = io.StringIO(), io.StringIO()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(self._out))
        self._stack.enter_context(contextlib.redirect_stderr(self._err))

    def __exit__(self, *exc: Any) -> None:
        self._stack.close()
        self.out, self.err = self._out.getvalue(), self._err.getvalue()


def test_compare_with_a_step_budget_runs_every_backend_at_about_equal_steps(budgeted: tuple[Path, str, str]) -> None:
    out, printed, err = budgeted
    rows = read_results(out / "results.csv")
    assert [(r.backend, r.status) for r in rows] == [("offline", "ok")] * 2 + [("q-learning", "ok")] * 2
    for r in rows:
        events = read_jsonl(out / str(r.run_dir) / "events.jsonl")
        assert r.env_steps_total is not None and r.env_steps_total >= 3000 > events[-2]["env_steps_total"]
        assert r.stop_reason is not None and r.stop_reason.startswith("step budget reached")
    means = [np.mean([r.env_steps_total or 0 for r in rows if r.backend == b]) for b in ("offline", "q-learning")]
    assert max(means) <= 1.1 * min(means)  # each run went past by at most one iteration
    md = (out / "results.md").read_text()
    assert "| backend | LLM | runs ok | episodes / run | steps / run |" in md
    offline = [r for r in rows if r.backend == "offline"]
    mean = sum(r.env_steps_total or 0 for r in offline) / 2
    assert f"| offline | no | 2/2 | {sum(r.episodes_total or 0 for r in offline) / 2:,.0f} | {mean:,.0f} |" in md
    assert "Interaction budget: at most 3,000 environment steps (`--max-steps`) per run" in md
    assert "unequal interaction" not in md + err and "episodes / run" in printed
    assert json.loads((out / "compare.json").read_text())["settings"]["max_steps"] == 3000
    page = write_report(out)[-1].read_text()
    assert "<th class=\"num\">steps / run</th>" in page and "Interaction budget" in page
    assert 'data-warning="interaction"' not in page


def test_curves_end_where_the_runs_ended(budgeted: tuple[Path, str, str]) -> None:
    out = budgeted[0]
    curves = json.loads((out / "curves.json").read_text())["runs"]
    for backend in ("offline", "q-learning"):
        ends = [max(c["x"]) for c in curves if c["backend"] == backend]
        mine = [(c["x"], c["y"]) for c in curves if c["backend"] == backend]
        grid = np.linspace(0.0, 2 * max(ends), 50)
        samples = step_curves(mine, grid, until_shortest=True)
        assert np.isnan(samples[:, grid > min(ends)]).all() and np.isfinite(samples[:, grid <= min(ends)]).any()
    runs = sorted((out / "runs" / "CartPole-v1").iterdir())
    fig = curves_figure(runs, "testing", x_axis="episodes")
    ends = {r.name: read_jsonl(r / "events.jsonl")[-1]["episodes_total"] for r in runs}
    for line in fig.axes[0].get_lines():
        label = str(line.get_label())
        group = next((g for g in ("q-learning", "offline") if label.startswith(g)), None)
        if group is None:
            continue
        x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
        shortest = min(v for k, v in ends.items() if k.startswith(group + "_s"))
        assert x[np.isfinite(y)].max() <= shortest


def test_compare_at_equal_iterations_warns_of_unequal_interaction(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    assert compare(tmp_path, out, "--iterations", "3") == 0
    captured = capsys.readouterr()
    rows = read_results(out / "results.csv")
    steps = {b: [r.env_steps_total or 0 for r in rows if r.backend == b] for b in ("offline", "q-learning")}
    assert min(steps["offline"]) > 1.1 * max(steps["q-learning"])  # what the issue saw: unequal experience
    warning = [line for line in captured.err.splitlines() if line.startswith("warning: unequal interaction")]
    assert len(warning) == 1 and "offline" in warning[0] and "--max-steps" in warning[0]
    assert "**Warning: unequal interaction" in (out / "results.md").read_text()
    page = write_report(out)[-1].read_text()
    assert 'data-warning="interaction"' in page and "unequal interaction" in page
