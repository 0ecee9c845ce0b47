"""The seed project's two plots (training and testing curves, raw and smoothed), drawn from ``events.jsonl``."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .errors import UserError  # noqa: E402
from .runlog import read_jsonl  # noqa: E402

__all__ = ["smooth", "load_events", "plot_run", "plot_runs", "save_figure"]


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
    path = Path(run_dir) / "events.jsonl"
    if not path.is_file():
        raise UserError(f"{run_dir} is not a run directory (no events.jsonl)")
    return read_jsonl(path)


def _series(events: list[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    it = np.array([e["iteration"] for e in events], dtype=float)
    val = np.array([np.nan if e.get(key) is None else float(e[key]) for e in events], dtype=float)
    return it, val


def _draw(ax: Any, it: np.ndarray, val: np.ndarray, label: str, window: int) -> None:
    line = ax.plot(it, val, alpha=0.35, marker=".", linestyle="-", label=f"{label} (raw)")[0]
    ax.plot(it, smooth(val, window), color=line.get_color(), linewidth=2, label=f"{label} (smoothed, {window})")


def plot_runs(run_dirs: Sequence[Path], out: Path, kind: str = "testing", window: int = 5) -> Path:
    """One figure of several runs: ``kind`` is ``training`` (train return) or ``testing`` (eval mean, best)."""
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    for rd in run_dirs:
        events = load_events(Path(rd))
        name = Path(rd).name if len(run_dirs) > 1 else ""
        if kind == "training":
            it, val = _series(events, "train_return")
            _draw(ax, it, val, f"{name} train return".strip(), window)
        else:
            it, val = _series(events, "eval_mean")
            _draw(ax, it, val, f"{name} candidate test mean".strip(), window)
            it, best = _series(events, "best_eval_mean")
            ax.step(it, best, where="post", linewidth=1.5, label=f"{name} kept table, test seeds".strip())
            if any(e.get("heldout_mean") is not None for e in events):
                it, held = _series(events, "heldout_mean")
                ax.step(it, held, where="post", linewidth=1.5, linestyle="--",
                        label=f"{name} kept table, held-out episodes (reported)".strip())
    ax.set_xlabel("iteration")
    ax.set_ylabel("return")
    title = "Training episodes (best table + exploration)" if kind == "training" else "Test episodes"
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    return save_figure(fig, Path(out))


def save_figure(fig: Any, out: Path) -> Path:
    """Save ``fig`` to ``out`` atomically (temporary file in the same folder, then rename) and close it."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp{out.suffix}")
    try:
        fig.savefig(tmp)
    finally:
        plt.close(fig)
    tmp.replace(out)
    return out


def plot_run(run_dir: Path, window: int = 5) -> tuple[Path, Path]:
    """Write ``training.png`` and ``testing.png`` into a run directory."""
    rd = Path(run_dir)
    return (
        plot_runs([rd], rd / "training.png", "training", window),
        plot_runs([rd], rd / "testing.png", "testing", window),
    )
