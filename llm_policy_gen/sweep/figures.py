"""The sweep's figure: ``curves.png``, the kept table's held-out mean against episodes per backend over seeds, each
backend's curve ending where its shortest run ended."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from ..plotting.stats import quartile_band, step_curves
from .results import Curve

__all__ = ["plot_curves"]


def plot_curves(curves: Sequence[Curve], out: Path, title: str, backends: Sequence[str] | None = None,
                threshold: float | None = None, points: int = 300,
                x_label: str = "environment episodes (training + test + confirmation)",
                names: Mapping[str, str] | None = None) -> Path:
    """Median and interquartile band per backend of step curves (``x_label``: what their x counts), each ending where
    the backend's shortest run ended (:func:`~.stats.step_curves`), named in the legend by ``names`` (entry ->
    display name; default the entry's own, :func:`~.methods.display_name`); returns ``out``."""
    from ..plotting.curves import figure_label, group_colours
    from ..plotting.figure import plt, save_figure
    from .methods import display_name

    order = list(backends) if backends else list(dict.fromkeys(c.backend for c in curves))
    colours = dict(zip(order, group_colours(len(order)), strict=True))
    xmax = max((max(c.x) for c in curves if c.x), default=1.0)
    grid = np.linspace(0.0, xmax, points)
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for b in order:
        mine = [(c.x, c.y) for c in curves if c.backend == b and c.x]
        if not mine:
            continue
        med, q1, q3 = quartile_band(step_curves(mine, grid, until_shortest=True))
        name = (names or {}).get(b) or display_name(b)
        ax.plot(grid, med, linewidth=2, color=colours[b], label=f"{figure_label(name)} (median of {len(mine)})")
        ax.fill_between(grid, q1, q3, color=colours[b], alpha=0.2, linewidth=0)
    if threshold is not None:
        ax.axhline(threshold, color="gray", linestyle="--", linewidth=1, label=f"solved ({threshold:g})")
    ax.set_xlabel(x_label)
    ax.set_ylabel("kept table: held-out mean return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return save_figure(fig, Path(out))
