"""``llm-policy-gen plot``: redraw the curves of one or several runs, or draw a run's best table.

::

    llm-policy-gen plot RUN_DIR... --out FILE [--kind testing|training|both] [--window N]
    llm-policy-gen plot RUN_DIR_OR_POLICY_JSON --policy --out FILE

Curves reuse :func:`llm_policy_gen.plots.plot_runs`. ``--kind both`` writes ``FILE`` with ``-training`` and
``-testing`` added before the extension. ``--policy`` draws the table (:func:`plot_policy`):

* a ``Box`` observation of two or more dimensions: one heat map per bin tuple of the leading dimensions, with the
  last two dimensions on the axes (CartPole: a 3 x 3 grid of cart position x cart velocity panels, each showing the
  action over pole angle x pole angular velocity);
* a grid of discrete cells (FrozenLake): one arrow per cell on the lake's map (holes and the goal left blank);
* anything else: a state x action image (one mark per state at its action).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .discretize import BoxDiscretizer, DiscreteDiscretizer
from .envs.spec import EnvSpec
from .errors import SpecError, UserError
from .policy import TablePolicy, load_run_policy


class _LazyPyplot:
    """``matplotlib.pyplot``, imported on first use so that the CLI starts fast."""

    def __getattr__(self, name: str) -> Any:
        from .plots import plt as pyplot

        return getattr(pyplot, name)


plt: Any = _LazyPyplot()

__all__ = ["plot_policy", "load_run_policy", "save_figure", "add_parser", "IMAGE_SUFFIXES", "MAX_PANELS"]

IMAGE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg", ".jpeg")
MAX_PANELS = 36
_ARROWS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, 1.0), "down": (0.0, -1.0)}


def _check_out(out: Path) -> Path:
    if out.suffix.lower() not in IMAGE_SUFFIXES:
        raise UserError(f"bad --out {str(out)!r}: the file must end with one of {', '.join(IMAGE_SUFFIXES)}")
    return out


def save_figure(fig: Any, out: Path) -> Path:
    """Save ``fig`` to ``out`` atomically and close it (see :func:`llm_policy_gen.plots.save_figure`)."""
    from .plots import save_figure as save

    return save(fig, out)


def _action_colours(n: int) -> tuple[Any, bool]:
    """A colour map for ``n`` actions and whether it is discrete (legend) or continuous (colour bar)."""
    from matplotlib.colors import ListedColormap

    if n <= 10:
        return ListedColormap([plt.get_cmap("tab10")(a) for a in range(n)]), True
    return plt.get_cmap("viridis", n), False


def _legend(fig: Any, policy: TablePolicy, cmap: Any) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=cmap(a), label=f"{a}: {policy.actions.describe(a)}") for a in range(policy.n_actions)]
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(handles)), fontsize=8, frameon=False)


def _short_bin(obs: BoxDiscretizer, dim: int, b: int) -> str:
    lo, hi = obs.bin_range(dim, b)
    return f"[{lo:.3g}, {hi:.3g})"


def _plot_box(policy: TablePolicy, obs: BoxDiscretizer, title: str) -> Any:
    bins = [int(b) for b in obs.bins]
    lead = bins[:-2]
    rows = lead[0] if lead else 1
    cols = int(np.prod(lead[1:])) if len(lead) > 1 else 1
    grid = policy.table.reshape(bins)
    cmap, discrete = _action_colours(policy.n_actions)
    fig, axes = plt.subplots(rows, cols, figsize=(2.3 * cols + 1.2, 2.1 * rows + 1.4), dpi=120, squeeze=False)
    yd, xd = len(bins) - 2, len(bins) - 1
    image = None
    for idx in np.ndindex(*lead) if lead else [()]:
        r = idx[0] if lead else 0
        c = int(np.ravel_multi_index(idx[1:], lead[1:])) if len(lead) > 1 else 0
        ax = axes[r][c]
        image = ax.imshow(grid[idx], origin="lower", cmap=cmap, vmin=-0.5, vmax=policy.n_actions - 0.5,
                          aspect="auto", interpolation="nearest")
        ax.set_xticks(range(bins[xd]))
        ax.set_yticks(range(bins[yd]))
        ax.set_xticklabels([f"{v:.2g}" for v in _centres(obs, xd)], fontsize=6, rotation=90)
        ax.set_yticklabels([f"{v:.2g}" for v in _centres(obs, yd)], fontsize=6)
        if idx:
            ax.set_title("\n".join(f"{obs.dims[j].name} {_short_bin(obs, j, b)}" for j, b in enumerate(idx)),
                         fontsize=7)
        if r == rows - 1:
            ax.set_xlabel(obs.dims[xd].name, fontsize=7)
        if c == 0:
            ax.set_ylabel(obs.dims[yd].name, fontsize=7)
    fig.suptitle(title, fontsize=10)
    if discrete:
        _legend(fig, policy, cmap)
        fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    else:
        fig.tight_layout(rect=(0, 0, 0.9, 0.97))
        assert image is not None
        fig.colorbar(image, ax=axes.ravel().tolist(), label="action index")
    return fig


def _centres(obs: BoxDiscretizer, dim: int) -> np.ndarray:
    b = obs.boundaries[dim]
    return (b[:-1] + b[1:]) / 2


def _lake_map(spec: EnvSpec | None, grid: tuple[int, int]) -> list[str] | None:
    """The letters of a FrozenLake-like map (S, F, H, G) when the environment exposes one."""
    if spec is None:
        return None
    try:
        from .envs.make import make_env

        env = make_env(spec)
        try:
            desc = getattr(env.unwrapped, "desc", None)
        finally:
            env.close()
    except Exception:  # no map to draw: plain cells
        return None
    if desc is None:
        return None
    rows = [b"".join(row).decode() if isinstance(row[0], bytes) else "".join(map(str, row)) for row in desc]
    return rows if (len(rows), len(rows[0])) == tuple(grid) else None


def _plot_grid(policy: TablePolicy, obs: DiscreteDiscretizer, spec: EnvSpec | None, title: str) -> Any:
    assert obs.grid is not None
    n_rows, n_cols = obs.grid
    letters = _lake_map(spec, (n_rows, n_cols))
    names = [policy.actions.describe(a).lower() for a in range(policy.n_actions)]
    dirs = []
    for nm in names:
        hits = [v for k, v in _ARROWS.items() if k in nm.split() or nm.endswith(k)]
        dirs.append(hits[0] if len(hits) == 1 else None)
    colours = {"H": "#30415d", "G": "#4caf50", "S": "#90caf9", "F": "#e3f2fd"}
    fig, ax = plt.subplots(figsize=(1.1 * n_cols + 1, 1.1 * n_rows + 1), dpi=120)
    for s in range(obs.n_states):
        r, c = divmod(s, n_cols)
        y = n_rows - 1 - r
        letter = letters[r][c] if letters else "F"
        ax.add_patch(plt.Rectangle((c, y), 1, 1, facecolor=colours.get(letter, "#eeeeee"), edgecolor="gray"))
        if letters:
            ax.text(c + 0.08, y + 0.8, letter, fontsize=8, color="white" if letter == "H" else "black")
        if letter in ("H", "G"):
            continue
        a = int(policy.table[s])
        d = dirs[a] if a < len(dirs) else None
        if d is None:
            ax.text(c + 0.5, y + 0.5, str(a), ha="center", va="center", fontsize=12)
        else:
            ax.arrow(c + 0.5 - 0.25 * d[0], y + 0.5 - 0.25 * d[1], 0.3 * d[0], 0.3 * d[1], head_width=0.16,
                     head_length=0.14, length_includes_head=False, color="black")
    ax.set_xlim(0, n_cols)
    ax.set_ylim(0, n_rows)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def _plot_generic(policy: TablePolicy, title: str) -> Any:
    n, m = policy.n_states, policy.n_actions
    img = np.zeros((m, n))
    img[policy.table, np.arange(n)] = 1.0
    fig, ax = plt.subplots(figsize=(min(12.0, 3 + n / 40), 1.5 + 0.3 * m), dpi=120)
    ax.imshow(img, aspect="auto", origin="lower", cmap="Greys", interpolation="nearest")
    ax.set_xlabel("state")
    ax.set_ylabel("action")
    if m <= 12:
        ax.set_yticks(range(m))
        ax.set_yticklabels([f"{a}: {policy.actions.describe(a)}"[:28] for a in range(m)], fontsize=7)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_policy(policy: TablePolicy, out: Path, spec: EnvSpec | None = None, title: str | None = None) -> Path:
    """Draw ``policy``'s table into ``out`` (see the module docstring for the three layouts)."""
    out = _check_out(Path(out))
    obs = policy.observation
    title = title or f"{policy.env_id}: best table ({policy.n_states} states)"
    if isinstance(obs, BoxDiscretizer) and len(obs.dims) >= 2 and math.prod(int(b) for b in obs.bins[:-2]) \
            <= MAX_PANELS:
        fig = _plot_box(policy, obs, title)
    elif isinstance(obs, DiscreteDiscretizer) and obs.grid is not None:
        fig = _plot_grid(policy, obs, spec, title)
    else:
        fig = _plot_generic(policy, title)
    return save_figure(fig, out)


# ---------------------------------------------------------------------------------------------------- CLI
def add_parser(subparsers: Any) -> None:
    """Register ``plot`` on the CLI's subparsers."""
    p = subparsers.add_parser(
        "plot", help="redraw the curves of runs, or draw a run's best table (--policy)",
        description="Redraw training/testing curves of one or several runs, or (--policy) draw a run's table.")
    p.add_argument("runs", nargs="+", help="run directories (or, with --policy, one run directory or policy JSON)")
    p.add_argument("--out", required=True, help="image file to write (.png, .pdf, .svg)")
    p.add_argument("--kind", choices=["testing", "training", "both"], default="testing",
                   help="curves to draw (default testing; both writes FILE-training and FILE-testing)")
    p.add_argument("--window", type=int, default=5, help="smoothing window in iterations (default 5)")
    p.add_argument("--policy", action="store_true", help="draw the best table instead of curves")
    p.set_defaults(func=_cmd_plot)


def _cmd_plot(args: argparse.Namespace) -> int:
    from .plots import plot_runs

    out = _check_out(Path(args.out))
    if args.window < 1:
        raise UserError(f"bad --window {args.window}: accepted an integer >= 1")
    if args.policy:
        if len(args.runs) != 1:
            raise UserError(f"--policy draws one table: give one run directory or policy file, got {len(args.runs)}")
        policy, spec = load_run_policy(args.runs[0])
        written: Sequence[Path] = [plot_policy(policy, out, spec)]
    else:
        runs = [Path(r) for r in args.runs]
        for r in runs:
            if not r.is_dir():
                raise UserError(f"{r} is not a run directory")
        kinds = ["training", "testing"] if args.kind == "both" else [args.kind]
        written = []
        for kind in kinds:
            target = out if len(kinds) == 1 else out.with_name(f"{out.stem}-{kind}{out.suffix}")
            try:
                written.append(plot_runs(runs, target, kind, args.window))
            except (KeyError, SpecError) as exc:
                raise UserError(f"cannot draw the {kind} curves: {exc}") from None
    for w in written:
        print(f"wrote {w}")
    return 0
