"""A run's best table, drawn (:func:`policy_figure`, :func:`plot_policy`; ``plot --policy``):

* an observation of two or more binned dimensions: heat maps of the action, with the two dimensions that have the
  most bins on the axes and one panel per bin tuple of the others (CartPole: pole angle x angular velocity, in a
  3 x 3 grid of cart position x cart velocity panels; Blackjack: player's sum x dealer's card, one panel per usable
  ace), each part of a discrete observation labelled by its values;
* a grid of discrete cells (FrozenLake, CliffWalking): one arrow per cell, with start, goal, holes and cliff marked;
* anything else (too many panels, one dimension): a state x action image.

Actions are labelled so that they stay apart: the parts of a vector action lose the words all their names share
("first rotor=1, second rotor=-1" for Swimmer's "Torque applied on the first rotor", ...).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..discretize import (
    ActionDiscretizer,
    BoxActions,
    BoxDiscretizer,
    DimSpec,
    DiscreteDiscretizer,
    MultiDiscreteActions,
)
from ..envs.spec import EnvSpec
from ..policy import TablePolicy
from .figure import check_image_path, plt, save_figure

__all__ = ["plot_policy", "policy_figure", "action_labels", "box_layout", "grid_map", "MAX_PANELS"]

MAX_PANELS = 36
_ARROWS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, 1.0), "down": (0.0, -1.0)}


#: Up to this many actions each gets its own colour and a legend entry (Hopper's 27 levels, Swimmer's 9); more
#: (BipedalWalker's 81) share a colour bar.
MAX_LEGEND_ACTIONS = 60


def _action_colours(n: int) -> tuple[Any, bool]:
    """A colour map for ``n`` actions and whether it is discrete (legend) or continuous (colour bar)."""
    from matplotlib.colors import ListedColormap

    if n <= 10:
        return ListedColormap([plt.get_cmap("tab10")(a) for a in range(n)]), True
    if n <= MAX_LEGEND_ACTIONS:
        palette = [plt.get_cmap(name)(k) for name in ("tab20", "tab20b", "tab20c") for k in range(20)]
        return ListedColormap(palette[:n]), True
    return plt.get_cmap("viridis", n), False


def _short_names(names: Sequence[str], short: int = 24) -> list[str]:
    """Long names without the words they all begin with: "Torque applied on the first rotor" and "... second
    rotor" become "first rotor" and "second rotor", so that labels built from them stay short and apart (names of
    up to ``short`` characters, such as "rotor 1 torque", are kept whole)."""
    if max((len(str(n)) for n in names), default=0) <= short:
        return [str(n) for n in names]
    words = [str(n).split() for n in names]
    k = 0
    while len(words) > 1 and all(len(w) > k + 1 for w in words) and len({w[k] for w in words}) == 1:
        k += 1
    return [" ".join(w[k:]) for w in words]


def action_labels(actions: ActionDiscretizer) -> list[str]:
    """One short, distinct label per action: ``"3: first rotor=0, second rotor=-1"`` for a vector action (the names
    of its parts without their common words), ``"1: move down"`` for a named discrete one."""
    n = actions.n_actions
    if isinstance(actions, (BoxActions, MultiDiscreteActions)):
        short = _short_names(actions.names)
        values = np.asarray(actions.to_env(np.arange(n)))
        return [f"{a}: " + ", ".join(f"{s}={float(v):g}" for s, v in zip(short, values[a], strict=True))
                for a in range(n)]
    return [f"{a}: {actions.describe(a)}" for a in range(n)]


def _legend(fig: Any, policy: TablePolicy, cmap: Any) -> None:
    from matplotlib.patches import Patch

    labels = action_labels(policy.actions)
    handles = [Patch(color=cmap(a), label=labels[a]) for a in range(policy.n_actions)]
    fig.legend(handles=handles, loc="lower center", ncol=min(3, len(handles)), fontsize=8, frameon=False)


def observation_is_discrete_parts(spec: EnvSpec | None) -> bool:
    """The environment's observation is a MultiDiscrete or a Tuple of Discrete (Blackjack): each bin of the table
    is one value of a part, and is drawn as that value rather than as a range."""
    if spec is None:
        return False
    try:
        import gymnasium as gym

        from ..envs.generic import env_spaces

        space, _ = env_spaces(spec.env_id, dict(spec.kwargs))
    except Exception:  # a drawing aid: without the space, bins are drawn as ranges
        return False
    return isinstance(space, (gym.spaces.MultiDiscrete, gym.spaces.Tuple))


def _one_value_bins(d: DimSpec) -> bool:
    return float(d.low).is_integer() and d.high - d.low == d.bins


def _tick_labels(obs: BoxDiscretizer, dim: int, values: bool) -> list[str]:
    d = obs.dims[dim]
    if values and _one_value_bins(d):
        return [str(int(d.low) + b) for b in range(d.bins)]
    bounds = obs.boundaries[dim]
    return [f"{v:.2g}" for v in (bounds[:-1] + bounds[1:]) / 2]


def _bin_text(obs: BoxDiscretizer, dim: int, b: int, values: bool) -> str:
    d = obs.dims[dim]
    if values and _one_value_bins(d):
        return f"{d.name} = {int(d.low) + b}"
    lo, hi = obs.bin_range(dim, b)
    return f"{d.name} [{lo:.3g}, {hi:.3g})"


def box_layout(obs: BoxDiscretizer) -> tuple[int, int, list[int]]:
    """(y dimension, x dimension, panel dimensions) of a heat-map drawing: the two dimensions with the most bins
    (the later ones on ties) on the axes, in their order, and one panel per bin tuple of the others."""
    order = sorted(range(len(obs.dims)), key=lambda j: (int(obs.bins[j]), j))
    y, x = sorted(order[-2:])
    return y, x, [j for j in range(len(obs.dims)) if j not in (y, x)]


def _panel_grid(panel_bins: list[int]) -> tuple[int, int, list[tuple[int, int]]]:
    """Rows, columns and the position of each panel: one panel dimension wraps into a near-square grid, two or
    more give rows of the first and columns of the others."""
    n = math.prod(panel_bins)
    if len(panel_bins) <= 1:
        cols = n if n <= 4 else math.ceil(math.sqrt(n))
        return math.ceil(n / cols), cols, [divmod(k, cols) for k in range(n)]
    cols = math.prod(panel_bins[1:])
    return panel_bins[0], cols, [divmod(k, cols) for k in range(n)]


def _plot_box(policy: TablePolicy, obs: BoxDiscretizer, title: str, values: bool) -> Any:
    bins = [int(b) for b in obs.bins]
    yd, xd, panel_dims = box_layout(obs)
    panel_bins = [bins[j] for j in panel_dims]
    rows, cols, places = _panel_grid(panel_bins)
    grid = policy.table.reshape(bins)
    cmap, discrete = _action_colours(policy.n_actions)
    titles = {idx: [_bin_text(obs, j, b, values) for j, b in zip(panel_dims, idx, strict=True)]
              for idx in (np.ndindex(*panel_bins) if panel_dims else [()])}
    longest = max((len(line) for lines in titles.values() for line in lines), default=0)
    # wide enough for the panel titles (about 0.06 inch a character at 7 points), so that they never overlap
    width, height = max(2.0, 0.2 * bins[xd] + 1.0, 0.06 * longest + 0.5), max(1.8, 0.16 * bins[yd] + 0.9)
    legend_rows = math.ceil(policy.n_actions / 3) if discrete else 0
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols + 1.0, height * rows + 0.8 + 0.22 * legend_rows),
                             dpi=120, squeeze=False)
    used = set(places)
    image = None
    for k, idx in enumerate(np.ndindex(*panel_bins) if panel_dims else [()]):
        r, c = places[k]
        ax = axes[r][c]
        sel: list[Any] = [slice(None)] * len(bins)
        for j, b in zip(panel_dims, idx, strict=True):
            sel[j] = b
        image = ax.imshow(grid[tuple(sel)], origin="lower", cmap=cmap, vmin=-0.5, vmax=policy.n_actions - 0.5,
                          aspect="auto", interpolation="nearest")
        ax.set_xticks(range(bins[xd]))
        ax.set_yticks(range(bins[yd]))
        ax.set_xticklabels(_tick_labels(obs, xd, values), fontsize=6, rotation=0 if values else 90)
        ax.set_yticklabels(_tick_labels(obs, yd, values), fontsize=6)
        if idx:
            ax.set_title("\n".join(titles[idx]), fontsize=7)
        if (r + 1, c) not in used:
            ax.set_xlabel(obs.dims[xd].name, fontsize=7)
        if c == 0:
            ax.set_ylabel(obs.dims[yd].name, fontsize=7)
    for r in range(rows):
        for c in range(cols):
            if (r, c) not in used:
                axes[r][c].set_visible(False)
    fig.suptitle(title, fontsize=10)
    if discrete:
        _legend(fig, policy, cmap)
        fig.tight_layout(rect=(0, (0.19 * legend_rows + 0.2) / fig.get_figheight(), 1, 0.97))
    else:
        fig.tight_layout(rect=(0, 0, 0.9, 0.97))
        assert image is not None
        fig.colorbar(image, ax=axes.ravel().tolist(), label="action index")
    return fig


#: What a grid cell is: its letter in a map, the word written in it, its colour. Arrows go only where an episode
#: can be (not on holes, the cliff or the goal).
_CELLS = {"S": ("start", "#90caf9"), "F": ("", "#eef5fb"), "H": ("hole", "#30415d"), "C": ("cliff", "#b5533c"),
          "G": ("goal", "#4caf50")}
_NO_ARROW = {"H", "C", "G"}


def grid_map(spec: EnvSpec | None, grid: tuple[int, int]) -> list[str] | None:
    """One letter per cell of a grid world (S start, G goal, H hole, C cliff, F the rest), read from the
    environment: FrozenLake's map, CliffWalking's cliff and start, and -- where the map names none -- the cells an
    episode ends on as goals. None when the environment says nothing of its cells."""
    if spec is None:
        return None
    try:
        from ..envs.make import make_env

        env = make_env(spec)
        try:
            cells = _read_cells(env.unwrapped, grid)
        finally:
            env.close()
    except Exception:  # a best-effort drawing aid: without it the cells are plain
        return None
    return None if all(c == "F" for row in cells for c in row) else ["".join(row) for row in cells]


def _read_cells(raw: Any, grid: tuple[int, int]) -> list[list[str]]:
    n_rows, n_cols = grid
    cells = [["F"] * n_cols for _ in range(n_rows)]
    desc = getattr(raw, "desc", None)
    if desc is not None and np.shape(desc) == (n_rows, n_cols):
        for r in range(n_rows):
            for c in range(n_cols):
                v = desc[r][c]
                letter = v.decode() if isinstance(v, bytes) else str(v)
                cells[r][c] = letter if letter in _CELLS else "F"
    cliff = getattr(raw, "_cliff", None)
    if cliff is not None and np.shape(cliff) == (n_rows, n_cols):
        for r, c in zip(*np.nonzero(np.asarray(cliff)), strict=True):
            cells[int(r)][int(c)] = "C"
    starts = np.nonzero(np.asarray(getattr(raw, "initial_state_distrib", [])))[0]
    if not any("S" in row for row in cells) and starts.size == 1:
        r, c = divmod(int(starts[0]), n_cols)
        cells[r][c] = "S"
    transitions = getattr(raw, "P", None)
    if not any("G" in row for row in cells) and isinstance(transitions, dict):
        for outcomes in (o for moves in transitions.values() for o in moves.values()):
            for _, nxt, _, done in outcomes:
                r, c = divmod(int(nxt), n_cols)
                if done and cells[r][c] == "F":
                    cells[r][c] = "G"
    return cells


def _plot_grid(policy: TablePolicy, obs: DiscreteDiscretizer, spec: EnvSpec | None, title: str) -> Any:
    from matplotlib.patches import Patch

    assert obs.grid is not None
    n_rows, n_cols = obs.grid
    letters = grid_map(spec, (n_rows, n_cols))
    names = [policy.actions.describe(a).lower() for a in range(policy.n_actions)]
    dirs = []
    for nm in names:
        hits = [v for k, v in _ARROWS.items() if k in nm.split() or nm.endswith(k)]
        dirs.append(hits[0] if len(hits) == 1 else None)
    fig, ax = plt.subplots(figsize=(0.9 * n_cols + 1, 0.9 * n_rows + 1.3), dpi=120)
    for s in range(obs.n_states):
        r, c = divmod(s, n_cols)
        y = n_rows - 1 - r
        letter = letters[r][c] if letters else "F"
        word, colour = _CELLS[letter]
        ax.add_patch(plt.Rectangle((c, y), 1, 1, facecolor=colour, edgecolor="gray"))
        if word:
            ax.text(c + 0.06, y + 0.94, word, fontsize=7, va="top",
                    color="white" if letter in ("H", "C") else "black")
        if letter in _NO_ARROW:
            continue
        a = int(policy.table[s])
        d = dirs[a] if a < len(dirs) else None
        if d is None:
            ax.text(c + 0.5, y + 0.45, str(a), ha="center", va="center", fontsize=12)
        else:
            ax.arrow(c + 0.5 - 0.22 * d[0], y + 0.45 - 0.22 * d[1], 0.26 * d[0], 0.26 * d[1], head_width=0.16,
                     head_length=0.14, length_includes_head=False, color="black")
    ax.set_xlim(0, n_cols)
    ax.set_ylim(0, n_rows)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=10)
    kinds = sorted({x for row in letters for x in row} - {"F"}, key="SGHC".index) if letters else []
    if kinds:
        handles = [Patch(facecolor=_CELLS[k][1], edgecolor="gray", label=_CELLS[k][0]) for k in kinds]
        fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=8, frameon=False)
        fig.tight_layout(rect=(0, 0.35 / fig.get_figheight(), 1, 1))
    else:
        fig.tight_layout()
    return fig


def _plot_generic(policy: TablePolicy, title: str) -> Any:
    n, m = policy.n_states, policy.n_actions
    img = np.zeros((m, n))
    img[policy.table, np.arange(n)] = 1.0
    fig, ax = plt.subplots(figsize=(min(12.0, 4 + n / 40), 1.5 + 0.3 * m), dpi=120)
    ax.imshow(img, aspect="auto", origin="lower", cmap="Greys", interpolation="nearest")
    ax.set_xlabel("state")
    ax.set_ylabel("action")
    if m <= 16:
        ax.set_yticks(range(m))
        ax.set_yticklabels(action_labels(policy.actions), fontsize=7)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def policy_figure(policy: TablePolicy, spec: EnvSpec | None = None, title: str | None = None) -> Any:
    """The matplotlib figure of ``policy``'s table (see the module docstring for the three layouts); ``spec`` (the
    run's environment) adds what the table alone does not know: a grid's cells, whether bins are values."""
    obs = policy.observation
    title = title or f"{policy.env_id}: best table ({policy.n_states} states)"
    if isinstance(obs, BoxDiscretizer) and len(obs.dims) >= 2 and \
            math.prod(int(obs.bins[j]) for j in box_layout(obs)[2]) <= MAX_PANELS:
        fig = _plot_box(policy, obs, title, observation_is_discrete_parts(spec))
    elif isinstance(obs, DiscreteDiscretizer) and obs.grid is not None:
        fig = _plot_grid(policy, obs, spec, title)
    else:
        fig = _plot_generic(policy, title)
    return fig


def plot_policy(policy: TablePolicy, out: Path, spec: EnvSpec | None = None, title: str | None = None) -> Path:
    """Draw ``policy``'s table into ``out`` (:func:`policy_figure`)."""
    out = check_image_path(Path(out))
    return save_figure(policy_figure(policy, spec, title), out)
