"""The report's figures, drawn with matplotlib's object API (no pyplot state) and inlined as PNG data URIs."""

from __future__ import annotations

import base64
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .data import CompareData, IterationView

__all__ = ["data_uri", "file_uri", "run_curves", "usage_curves", "policy_image", "seed_curves"]

_TEST, _HELD, _CAND, _TRAIN = "#1f77b4", "#d62728", "#9e9e9e", "#2ca02c"


def data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def file_uri(path: Path) -> str | None:
    """An existing PNG file as a data URI (None when it is missing or not a PNG)."""
    try:
        data = Path(path).read_bytes()
    except OSError:
        return None
    return data_uri(data) if data.startswith(b"\x89PNG") else None


def _figure(width: float, height: float) -> Any:
    from ..plotting.figure import plt  # matplotlib, imported when a page is drawn

    return plt.figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(fig: Any) -> str:
    from ..plotting.figure import png_bytes

    return data_uri(png_bytes(fig))


def _steps(xs: Sequence[float | None], ys: Sequence[float | None]) -> tuple[list[float], list[float]]:
    pts = [(float(x), float(y)) for x, y in zip(xs, ys, strict=True) if x is not None and y is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def run_curves(its: Sequence[IterationView], threshold: float | None) -> str | None:
    """Two panels: against iterations (every candidate's test mean, the kept table's test and held-out means, the
    training return) and against counted environment episodes (the kept table's two means)."""
    if not its:
        return None
    from matplotlib.ticker import MaxNLocator

    fig = _figure(11, 3.9)
    ax_it, ax_ep = fig.subplots(1, 2)
    cx = [it.iteration for it in its for m in it.candidate_means if m is not None]
    cy = [float(m) for it in its for m in it.candidate_means if m is not None]
    ax_it.scatter(cx, cy, s=10, color=_CAND, alpha=0.6, label="candidates' test means", zorder=2)
    kept = [(it.iteration, it.test_mean) for it in its if it.accepted and it.test_mean is not None]
    if kept:
        ax_it.scatter([k[0] for k in kept], [k[1] for k in kept], s=40, facecolors="none", edgecolors="black",
                      label="adopted candidate", zorder=3)
    x, y = _steps([it.iteration for it in its], [it.train_return for it in its])
    ax_it.plot(x, y, color=_TRAIN, alpha=0.5, linewidth=1, label="training episodes (mean return)")
    for ax, xs in ((ax_it, [it.iteration for it in its]), (ax_ep, [it.episodes_total for it in its])):
        x, y = _steps(xs, [it.best_test for it in its])
        ax.step(x, y, where="post", color=_TEST, linewidth=2, label="kept table: test mean (decides)")
        x, y = _steps(xs, [it.heldout for it in its])
        ax.step(x, y, where="post", color=_HELD, linewidth=2, linestyle="--",
                label="kept table: held-out mean (reported)")
        if threshold is not None:
            ax.axhline(threshold, color="gray", linewidth=1, linestyle=":", label=f"solved ({threshold:g})")
        ax.set_ylabel("return")
        ax.grid(alpha=0.3)
    ax_it.set_xlabel("iteration")
    ax_it.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_ep.set_xlabel("environment episodes (training + test + confirmation)")
    ax_it.set_title("against iterations", fontsize=10)
    ax_ep.set_title("against episodes", fontsize=10)
    ax_it.legend(fontsize=7, loc="best")
    return _png(fig)


def usage_curves(its: Sequence[IterationView]) -> str | None:
    """Tokens per iteration and the running cost; None when the run used no tokens."""
    if not any(it.input_tokens or it.output_tokens for it in its):
        return None
    from matplotlib.ticker import MaxNLocator

    fig = _figure(11, 2.8)
    ax = fig.subplots()
    xs = [it.iteration for it in its]
    ax.bar(xs, [it.input_tokens for it in its], color="#8fb8de", label="input tokens")
    ax.bar(xs, [it.output_tokens for it in its], bottom=[it.input_tokens for it in its], color="#f4a261",
           label="output tokens")
    ax.set_xlabel("iteration")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("tokens")
    ax.grid(alpha=0.3, axis="y")
    cost, running = [], 0.0
    for it in its:
        running = float(it.cost_total) if it.cost_total is not None else running + it.cost_usd
        cost.append(running)
    ax2 = ax.twinx()
    ax2.plot(xs, cost, color="black", linewidth=1.5, label="cost so far (USD)")
    ax2.set_ylabel("USD")
    handles = ax.get_legend_handles_labels()
    extra = ax2.get_legend_handles_labels()
    ax.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=7, loc="upper left")
    return _png(fig)


def policy_image(run_dir: Path) -> tuple[str | None, str]:
    """The best table drawn by :func:`llm_policy_gen.plotting.table_figure.plot_policy`, or None and why not."""
    from ..plotting.table_figure import plot_policy
    from ..run.files import RunDir, load_run_policy

    rd = RunDir(Path(run_dir))
    best = rd.best_policy
    if rd.network_policy[0].is_file():
        return None, f"the policy is a peer's network ({rd.network_policy[1].name}), not a table: no table figure"
    if not best.is_file():
        return None, f"no {best.name} in this run directory"
    try:
        policy, spec = load_run_policy(run_dir)
        with tempfile.TemporaryDirectory() as tmp:
            out = plot_policy(policy, Path(tmp) / "policy.png", spec)
            return file_uri(out), ""
    except Exception as exc:  # a figure is an extra: the page shows why it is missing instead of failing
        return None, f"the policy figure could not be drawn: {str(exc).splitlines()[0] if str(exc) else exc!r}"


def seed_curves(data: CompareData, threshold: float | None) -> str | None:
    """One panel per backend, one line per seed: the kept table's held-out mean against episodes."""
    from ..plotting.curves import figure_label  # matplotlib, imported when a page is drawn
    order = [b for b in data.backends if any(c.backend == b and c.x for c in data.curves)]
    if not order:
        return None
    names = {r.backend: r.name for r in data.rows}
    cols = min(3, len(order))
    rows = math.ceil(len(order) / cols)
    fig = _figure(3.7 * cols, 2.6 * rows)
    axes = fig.subplots(rows, cols, squeeze=False, sharey=True)
    for k, b in enumerate(order):
        ax = axes[k // cols][k % cols]
        for c in (c for c in data.curves if c.backend == b and c.x):
            ax.step(c.x, c.y, where="post", linewidth=1.3, label=f"seed {c.seed}")
        if threshold is not None:
            ax.axhline(threshold, color="gray", linewidth=1, linestyle=":")
        ax.set_title(figure_label(names.get(b) or b), fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=7)
        if len(ax.get_lines()) <= 8:
            ax.legend(fontsize=6, loc="lower right")
    for k in range(len(order), rows * cols):
        axes[k // cols][k % cols].set_visible(False)
    fig.supxlabel("environment episodes", fontsize=8)
    fig.supylabel("held-out mean of the kept table", fontsize=8)
    return _png(fig)
