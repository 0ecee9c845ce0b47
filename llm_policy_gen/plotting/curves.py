"""Curves of runs, drawn from their ``events.jsonl``: a run's ``training.png`` and ``testing.png``, and ``plot``'s
curves.

One run (the seed project's two plots):

* ``training.png``: the return of each iteration's training episodes (best table plus exploration), raw and
  smoothed;
* ``testing.png``: every candidate's mean on the iteration's test seeds (dots), the chosen candidate's, raw and
  smoothed, and the kept table's **held-out** mean as a step line -- the measurement reported in
  ``summary.json``, taken on the same held-out episodes whenever the best changes, so it does
  not move when the test seeds grow.

Both draw the environment's reward threshold (or, when it lies far outside the curves, say where it is) and take
the x-axis in iterations (with environment episodes on a second axis on top) or in episodes (``x_axis``).

Several runs: the runs are grouped by backend (and mode, written ``BACKEND@MODE`` as in ``compare``); each group is
one colour, its median over runs a line and its interquartile range a band, with one legend entry per group.
``testing`` draws the kept table's held-out mean, ``training`` the smoothed training return. A group's median and
band end where its shortest run ended (beyond it fewer than all its runs have data, and a median of the rest would
draw experience some runs never had), as ``compare``'s ``curves.png`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.ticker import MaxNLocator

from ..errors import UserError
from ..run.files import RunDir
from .figure import plt, save_figure
from .stats import quartile_band, step_curves

__all__ = ["KINDS", "X_AXES", "RunCurves", "smooth", "load_events", "load_run", "group_colours", "figure_label",
           "curves_figure", "plot_run", "plot_runs"]

KINDS = ("testing", "training")
X_AXES = ("iterations", "episodes")
_X_LABELS = {"iterations": "iteration", "episodes": "environment episodes (training + test + confirmation)"}
_GRID_POINTS = 300


def smooth(values: Sequence[float] | np.ndarray, window: int = 5) -> np.ndarray:
    """Trailing moving average (NaNs ignored); the first points average what exists so far."""
    x = np.asarray(values, dtype=float)
    out = np.full(x.shape, np.nan)
    for i in range(x.size):
        seg = x[max(0, i - window + 1) : i + 1]
        seg = seg[np.isfinite(seg)]
        if seg.size:
            out[i] = seg.mean()
    return out


def load_events(run_dir: Path) -> list[dict[str, Any]]:
    """A run's events.jsonl lines (of any version) in the code's names."""
    rd = RunDir(Path(run_dir))
    if not rd.events.is_file():
        raise UserError(f"{run_dir} is not a run directory (no {rd.events.name})")
    return rd.read(check=False).events


def _section(record: dict[str, Any], key: str) -> dict[str, Any]:
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def _floats(events: Sequence[dict[str, Any]], key: str) -> np.ndarray:
    return np.array([np.nan if e.get(key) is None else float(e[key]) for e in events], dtype=float)


def _forward_fill(values: np.ndarray) -> np.ndarray:
    out = values.copy()
    for i in range(1, out.size):
        if not np.isfinite(out[i]):
            out[i] = out[i - 1]
    return out


@dataclass
class RunCurves:
    """What the plots draw of one run."""

    name: str
    env_id: str
    group: str
    """``BACKEND`` (``BACKEND@MODE`` for another mode than table): the runs drawn as one median."""
    threshold: float | None
    iterations: np.ndarray
    episodes: np.ndarray
    """Environment episodes counted at the end of each iteration."""
    train: np.ndarray
    chosen: np.ndarray
    """The chosen candidate's mean on the iteration's test seeds."""
    candidates: list[list[float]]
    heldout: np.ndarray
    """The kept table's held-out mean after each iteration (NaN until one was measured)."""
    heldout_episodes: int | None
    final_heldout: float | None
    """``summary.json``'s held-out mean of the best policy (direct mode measures the held-out episodes only at the
    end)."""

    def x(self, axis: str) -> np.ndarray:
        return self.episodes if axis == "episodes" else self.iterations


def load_run(run_dir: Path) -> RunCurves:
    """The curves of the run in ``run_dir`` (its events, and the backend, mode and threshold of its config)."""
    rd = RunDir(Path(run_dir))
    if not rd.events.is_file():
        raise UserError(f"{run_dir} is not a run directory (no {rd.events.name})")
    view = rd.read(check=False)
    events = [e for e in view.events if e.get("iteration") is not None]
    summary, cfg, spec = view.summary, view.settings, _section(view.record, "env_spec")
    backend = view.backend_spec or "run"
    mode = view.mode
    threshold = view.threshold
    held = _forward_fill(_floats(events, "heldout_mean"))
    sizes = [int(e["heldout_episodes"]) for e in events if e.get("heldout_episodes")]
    final = summary.get("best_heldout_mean")
    return RunCurves(
        name=rd.path.name,
        env_id=str(spec.get("env_id") or summary.get("env_id") or ""),
        group=backend if mode == "table" else f"{backend}@{mode}",
        threshold=None if threshold is None else float(threshold),
        iterations=_floats(events, "iteration"),
        episodes=_floats(events, "episodes_total"),
        train=_floats(events, "train_return"),
        chosen=_floats(events, "test_mean"),
        candidates=[[float(m) for m in (e.get("candidate_means") or []) if m is not None] for e in events],
        heldout=held,
        heldout_episodes=sizes[-1] if sizes else summary.get("best_heldout_episodes") or cfg.get("heldout_episodes"),
        final_heldout=None if final is None else float(final),
    )


def group_colours(n: int) -> list[Any]:
    """``n`` colours, none repeated: tab10 up to 10, tab20 up to 20, evenly spaced on a continuous map beyond."""
    if n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    if n <= 20:
        return [plt.get_cmap("tab20")(i) for i in range(n)]
    return [plt.get_cmap("turbo")(v) for v in np.linspace(0.05, 0.95, n)]


def _threshold(ax: Any, threshold: float | None, drawn: np.ndarray) -> None:
    """The reward threshold as a line, or -- when drawing it would stretch the y-axis to more than five times the
    curves' range -- as a note in the corner, so that the curves keep their scale (Hopper's 3800 next to returns of
    a few hundred); CartPole's 475 above early returns of 20 is still drawn."""
    if threshold is None:
        return
    finite = drawn[np.isfinite(drawn)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (threshold, threshold)
    span = max(hi - lo, abs(hi) * 0.1, 1e-9)
    if max(hi, threshold) - min(lo, threshold) <= 5 * span:
        ax.axhline(threshold, color="0.35", linestyle=":", linewidth=1.2, label=f"solved at {threshold:g}")
        return
    where = "above" if threshold > hi else "below"
    ax.text(0.99, 0.98 if where == "above" else 0.02, f"solved at {threshold:g} ({where} the plot)",
            transform=ax.transAxes, ha="right", va="top" if where == "above" else "bottom", fontsize=7, color="0.3")


def _iterations_axis(ax: Any, x: np.ndarray) -> None:
    """Whole iterations on the x-axis, half an iteration of margin on each side."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    if np.isfinite(x).any():
        ax.set_xlim(float(np.nanmin(x)) - 0.5, float(np.nanmax(x)) + 0.5)


def _episodes_on_top(ax: Any, run: RunCurves) -> None:
    """A second x-axis on top that reads the iterations as environment episodes."""
    it, ep = run.iterations, run.episodes
    ok = np.isfinite(it) & np.isfinite(ep)
    it, ep = it[ok], ep[ok]
    if it.size < 2 or np.any(np.diff(it) <= 0) or np.any(np.diff(ep) <= 0):
        return
    top = ax.secondary_xaxis("top", functions=(lambda x: np.interp(x, it, ep), lambda x: np.interp(x, ep, it)))
    top.set_xlabel("environment episodes", fontsize=8)
    top.tick_params(labelsize=7)


def _draw_raw_and_smoothed(ax: Any, x: np.ndarray, y: np.ndarray, label: str, colour: Any, window: int) -> None:
    ax.plot(x, y, color=colour, alpha=0.35, marker=".", linewidth=1, label=f"{label} (raw)")
    ax.plot(x, smooth(y, window), color=colour, linewidth=2, label=f"{label} (smoothed over {window})")


def _one_run_figure(run: RunCurves, kind: str, window: int, x_axis: str) -> Any:
    fig, ax = plt.subplots(figsize=(7.5, 4.6), dpi=120)
    x = run.x(x_axis)
    drawn = [run.train] if kind == "training" else [run.chosen, run.heldout]
    if kind == "training":
        _draw_raw_and_smoothed(ax, x, run.train, "training return", "tab:blue", window)
        title = "Training episodes (best table + exploration)"
    else:
        xs = [xv for xv, means in zip(x, run.candidates, strict=True) for _ in means]
        ys = [m for means in run.candidates for m in means]
        if len(ys) > len(x):  # K > 1: every candidate's test mean, behind the chosen one's
            ax.scatter(xs, ys, s=9, color="0.6", alpha=0.6, linewidths=0, label="candidates' test means")
            drawn.append(np.asarray(ys, dtype=float))
        _draw_raw_and_smoothed(ax, x, run.chosen, "chosen candidate's test mean", "tab:blue", window)
        n = f" ({run.heldout_episodes} episodes)" if run.heldout_episodes else ""
        if np.isfinite(run.heldout).any():
            ax.step(x, run.heldout, where="post", color="tab:red", linewidth=2.2, marker="o", markersize=3,
                    label=f"kept table: held-out mean{n}, reported")
        elif run.final_heldout is not None and x.size:
            ax.plot([x[-1]], [run.final_heldout], marker="D", color="tab:red", linestyle="none",
                    label=f"held-out mean at the end{n}, reported")
            drawn.append(np.array([run.final_heldout]))
        title = "Test episodes and the kept table's held-out mean"
    _threshold(ax, run.threshold, np.concatenate(drawn) if drawn else np.array([]))
    if x_axis == "iterations":
        _iterations_axis(ax, x)
        _episodes_on_top(ax, run)
    ax.set_xlabel(_X_LABELS[x_axis])
    ax.set_ylabel("return")
    ax.set_title(f"{run.env_id}: {title}" if run.env_id else title, fontsize=10)
    ax.grid(alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    rows = (len(handles) + 1) // 2
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.04 * rows + 0.005, 1, 1))
    return fig


def _group_samples(runs: Sequence[RunCurves], kind: str, window: int, x_axis: str,
                   grid: np.ndarray) -> np.ndarray:
    curves: list[tuple[Any, Any]] = []
    for r in runs:
        x = r.x(x_axis)
        y = smooth(r.train, window) if kind == "training" else r.heldout
        ok = np.isfinite(x) & np.isfinite(y)
        if kind == "testing" and not ok.any() and r.final_heldout is not None and np.isfinite(x).any():
            # direct mode measures the held-out episodes once, at the end
            curves.append((np.array([np.nanmax(x)]), np.array([r.final_heldout])))
            continue
        curves.append((x[ok], y[ok]))
    return step_curves(curves, grid, until_shortest=True)


def figure_label(name: str, limit: int = 40) -> str:
    """A backend (or group) name as a legend entry or panel title, at most ``limit`` characters, so that it never
    pushes a legend or its neighbours' titles out of the figure. A long path (a replay file's) keeps its kind and its
    end, where the runs differ (``replay:…/run_0001/transcripts.jsonl``); any other long name keeps its start, which
    says what it is (``offline (not an LLM: the table-writ…``)."""
    name = str(name)
    if len(name) <= limit:
        return name
    if "/" not in name:
        return name[:limit - 1] + "…"
    kind, sep, _ = name.partition(":")
    keep = kind + sep if sep and len(kind) < limit // 3 else ""
    return keep + "…" + name[-(limit - len(keep) - 1):]


def _groups_figure(runs: Sequence[RunCurves], kind: str, window: int, x_axis: str) -> Any:
    groups: dict[str, list[RunCurves]] = {}
    for r in runs:
        groups.setdefault(r.group, []).append(r)
    xmax = max((float(np.nanmax(r.x(x_axis))) for r in runs if np.isfinite(r.x(x_axis)).any()), default=1.0)
    grid = np.arange(1.0, xmax + 1.0) if x_axis == "iterations" else np.linspace(0.0, xmax, _GRID_POINTS)
    fig, ax = plt.subplots(figsize=(8.0, 4.6), dpi=120)
    drawn: list[np.ndarray] = []
    for (name, members), colour in zip(groups.items(), group_colours(len(groups)), strict=True):
        med, q1, q3 = quartile_band(_group_samples(members, kind, window, x_axis, grid))
        runs_text = f"{len(members)} run{'s' if len(members) != 1 else ''}"
        if x_axis == "iterations":
            ax.plot(grid, med, color=colour, linewidth=2, marker=".", label=f"{figure_label(name)} ({runs_text})")
        else:
            ax.plot(grid, med, color=colour, linewidth=2, label=f"{figure_label(name)} ({runs_text})")
        if len(members) > 1:
            ax.fill_between(grid, q1, q3, color=colour, alpha=0.18, linewidth=0)
        drawn += [q1, q3]
    threshold = next((r.threshold for r in runs if r.threshold is not None), None)
    _threshold(ax, threshold, np.concatenate(drawn))
    what = (f"training return (smoothed over {window})" if kind == "training"
            else "kept table: held-out mean return")
    env = runs[0].env_id
    ax.set_title(f"{env + ': ' if env else ''}{what}\nmedian over runs, band: interquartile range", fontsize=10)
    if x_axis == "iterations":
        _iterations_axis(ax, grid)
    ax.set_xlabel(_X_LABELS[x_axis])
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    n_entries = len(groups) + (threshold is not None)
    if n_entries > 6:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
                  ncol=1 if n_entries <= 18 else 2)
    else:
        ax.legend(fontsize=8, loc="best", framealpha=0.85)
    fig.tight_layout()
    return fig


def curves_figure(run_dirs: Sequence[Path], kind: str = "testing", window: int = 5,
                  x_axis: str = "iterations") -> Any:
    """The matplotlib figure of ``kind`` (``testing`` or ``training``) for one run, or for several runs grouped by
    backend (see the module docstring); the caller saves or closes it."""
    if kind not in KINDS:
        raise UserError(f"bad --kind {kind!r}: accepted {', '.join(KINDS)}")
    if x_axis not in X_AXES:
        raise UserError(f"bad --x-axis {x_axis!r}: accepted {', '.join(X_AXES)}")
    if window < 1:
        raise UserError(f"bad --window {window}: accepted an integer >= 1")
    runs = [load_run(Path(rd)) for rd in run_dirs]
    if not runs:
        raise UserError("no run directory given")
    envs = sorted({r.env_id for r in runs if r.env_id})
    if len(envs) > 1:
        raise UserError(f"the runs are of different environments ({', '.join(envs)}); their returns do not share "
                        "a scale: plot each environment on its own")
    if len(runs) == 1:
        return _one_run_figure(runs[0], kind, window, x_axis)
    return _groups_figure(runs, kind, window, x_axis)


def plot_runs(run_dirs: Sequence[Path], out: Path, kind: str = "testing", window: int = 5,
              x_axis: str = "iterations") -> Path:
    """Write :func:`curves_figure` to ``out``."""
    return save_figure(curves_figure(run_dirs, kind, window, x_axis), Path(out))


def plot_run(run_dir: Path, window: int = 5, x_axis: str = "iterations") -> tuple[Path, Path]:
    """Write ``training.png`` and ``testing.png`` into a run directory."""
    rd = RunDir(Path(run_dir))
    return (
        plot_runs([rd.path], rd.training_png, "training", window, x_axis),
        plot_runs([rd.path], rd.testing_png, "testing", window, x_axis),
    )
