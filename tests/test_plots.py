"""Curves of runs (issue 9, items 22 and 23): a run's training.png and testing.png, and ``plot`` over several runs.

The runs here are written as a run writes them (``config.json`` and ``events.jsonl`` of the contract), with known
numbers, so that every drawn value can be checked; one real run checks the files a run leaves.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.colors import to_hex

from llm_policy_gen.cli import main
from llm_policy_gen.errors import UserError
from llm_policy_gen.plotting.curves import curves_figure
from llm_policy_gen.plotting.figure import plt

ITERATIONS = 6


def write_run(root: Path, name: str, backend: str, seed: int, mode: str = "table", threshold: float | None = 475.0,
              env_id: str = "CartPole-v1", heldout: list[float | None] | None = None,
              best_test: list[float] | None = None, scale: float = 1.0) -> Path:
    """A run directory with ITERATIONS iterations of known numbers (episodes: 10 per iteration plus the seed)."""
    d = root / name
    d.mkdir(parents=True)
    config = {"seed": seed, "mode": mode, "config": {"backend": backend, "seed": seed, "heldout_episodes": 100},
              "env_spec": {"env_id": env_id, "reward_threshold": threshold}}
    (d / "config.json").write_text(json.dumps(config))
    held = heldout or [scale * (100.0 + 50 * i + 10 * seed) for i in range(ITERATIONS)]
    tests = best_test or [scale * (120.0 + 40 * i) for i in range(ITERATIONS)]
    lines = []
    for i in range(ITERATIONS):
        lines.append({
            "iteration": i + 1, "episodes_total": 10 * (i + 1) + seed, "train_return": scale * (20.0 * i + seed),
            "eval_mean": scale * (30.0 * i), "candidate_means": [scale * (30.0 * i), scale * 5.0],
            "best_test_mean": tests[i], "best_eval_mean": held[i], "heldout_mean": held[i],
            "heldout_episodes": 100, "accepted": i == 0,
        })
    (d / "events.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def labelled_lines(ax: Any) -> dict[str, Any]:
    return {ln.get_label(): ln for ln in ax.get_lines() if not ln.get_label().startswith("_")}


@pytest.fixture(autouse=True)
def close_figures() -> Any:
    yield
    plt.close("all")


# ----------------------------------------------------------------------------------------------- item 22
def test_several_runs_are_one_median_and_band_per_backend_in_colours_that_never_repeat(tmp_path: Path) -> None:
    backends = [f"backend{k:02d}" for k in range(12)]
    runs = [write_run(tmp_path, f"{b}_s{s}", b, s) for b in backends for s in range(3)]
    fig = curves_figure(runs, "testing")
    ax = fig.axes[0]
    lines = labelled_lines(ax)
    assert sorted(lines) == sorted([f"{b} (3 runs)" for b in backends] + ["solved at 475"])
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [f"{b} (3 runs)" for b in backends] + ["solved at 475"]
    colours = [to_hex(lines[f"{b} (3 runs)"].get_color()) for b in backends]
    assert len(set(colours)) == len(colours)
    assert len(ax.collections) == len(backends)  # one interquartile band per backend
    # the median line is the median over the group's runs of the kept table's held-out mean, iteration by iteration
    median = lines["backend00 (3 runs)"]
    expected = [np.median([100.0 + 50 * i + 10 * s for s in range(3)]) for i in range(ITERATIONS)]
    assert list(median.get_xdata()) == list(range(1, ITERATIONS + 1))
    assert np.allclose(median.get_ydata(), expected)


def test_more_than_twenty_backends_still_get_distinct_colours(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, f"b{k}", f"b{k}", 0) for k in range(23)]
    lines = labelled_lines(curves_figure(runs, "training").axes[0])
    colours = [to_hex(ln.get_color()) for name, ln in lines.items() if name.startswith("b")]
    assert len(colours) == 23 and len(set(colours)) == 23


def test_modes_are_groups_of_their_own(tmp_path: Path) -> None:
    runs = [write_run(tmp_path, "a", "openai:gpt-x", 0), write_run(tmp_path, "b", "openai:gpt-x", 1),
            write_run(tmp_path, "c", "openai:gpt-x", 0, mode="direct")]
    names = set(labelled_lines(curves_figure(runs).axes[0]))
    assert names == {"openai:gpt-x (2 runs)", "openai:gpt-x@direct (1 run)", "solved at 475"}


def test_runs_of_different_environments_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_run(tmp_path, "a", "offline", 0)
    b = write_run(tmp_path, "b", "offline", 0, env_id="Acrobot-v1", threshold=-100.0)
    with pytest.raises(UserError, match="different environments"):
        curves_figure([a, b])
    assert main(["plot", str(a), str(b), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Acrobot-v1, CartPole-v1" in err


# ----------------------------------------------------------------------------------------------- item 23
def test_a_runs_testing_curve_draws_the_held_out_mean_not_the_rescored_test_mean(tmp_path: Path) -> None:
    """The kept table is re-scored on more test seeds as they rise, so its test mean falls (500 -> 470) while the
    table does not change; the plot draws its held-out measurement, which holds."""
    held = [None, 490.0, 490.0, 490.0, 490.0, 490.0]
    rescored = [500.0, 500.0, 495.0, 480.0, 475.0, 470.0]
    run = write_run(tmp_path, "one", "offline", 0, heldout=held, best_test=rescored)
    ax = curves_figure([run], "testing").axes[0]
    lines = labelled_lines(ax)
    kept = lines["kept table: held-out mean (100 episodes), reported"]
    assert np.array_equal(kept.get_ydata(), [np.nan, 490, 490, 490, 490, 490], equal_nan=True)
    assert not any(np.allclose(ln.get_ydata(), rescored) for ln in ax.get_lines() if len(ln.get_ydata()) == 6)
    assert "chosen candidate's test mean (raw)" in lines


def test_threshold_line_and_an_episodes_axis(tmp_path: Path) -> None:
    run = write_run(tmp_path, "one", "offline", 2)
    ax = curves_figure([run], "training").axes[0]
    solved = labelled_lines(ax)["solved at 475"]
    assert list(solved.get_ydata()) == [475, 475]
    assert ax.get_xlabel() == "iteration"
    tops = [a for a in ax.child_axes if a.get_xlabel() == "environment episodes"]
    assert len(tops) == 1  # iterations below, the same points in episodes on top
    ax = curves_figure([run], "testing", x_axis="episodes").axes[0]
    assert ax.get_xlabel().startswith("environment episodes")
    kept = labelled_lines(ax)["kept table: held-out mean (100 episodes), reported"]
    assert list(kept.get_xdata()) == [10 * i + 2 for i in range(1, ITERATIONS + 1)]


def test_a_threshold_far_above_the_curves_is_written_not_drawn(tmp_path: Path) -> None:
    run = write_run(tmp_path, "hop", "offline", 0, env_id="Hopper-v5", threshold=3800.0, scale=0.2)
    ax = curves_figure([run], "testing").axes[0]
    assert "solved at 3800" not in labelled_lines(ax)
    assert any(t.get_text() == "solved at 3800 (above the plot)" for t in ax.texts)
    assert ax.get_ylim()[1] < 1000  # the curves keep their scale


def test_plot_x_axis_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    runs = [write_run(tmp_path, f"r{s}", "offline", s) for s in range(2)]
    out = tmp_path / "curves.png"
    assert main(["plot", *map(str, runs), "--x-axis", "episodes", "--out", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG" and f"wrote {out}" in capsys.readouterr().out
    assert main(["plot", str(runs[0]), "--x-axis", "seconds", "--out", str(out)]) == 2
    assert "bad --x-axis 'seconds': accepted iterations, episodes" in capsys.readouterr().err


def test_a_run_writes_both_plots_from_its_own_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--backend", "offline", "--iterations", "2", "--candidates", "2", "--heldout-episodes",
                 "5", "--logs-dir", str(tmp_path), "--run-id", "r", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "CartPole-v1" / "r"
    for name in ("training.png", "testing.png"):
        assert (run / name).read_bytes()[:4] == b"\x89PNG"
    ax = curves_figure([run], "testing").axes[0]
    summary = json.loads((run / "summary.json").read_text())
    kept = labelled_lines(ax)["kept table: held-out mean (5 episodes), reported"]
    assert kept.get_ydata()[-1] == pytest.approx(summary["best_eval_mean"])


def test_a_long_label_keeps_a_paths_end_and_any_other_names_start() -> None:
    from llm_policy_gen.plotting.curves import figure_label

    path = "replay:/home/user/runs/cartpole/sweep_0001/run_0001/transcripts.jsonl"
    assert figure_label(path) == "replay:…" + path[-32:]
    long_name = "offline (not an LLM: the table-writing optimiser)"
    assert figure_label(long_name) == long_name[:39] + "…"
    assert figure_label("offline") == "offline"
    assert all(len(figure_label(n)) == 40 for n in (path, long_name))
