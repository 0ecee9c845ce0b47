"""One counting rule and one selection rule for every mode (``--select``).

**Counting.** A run counts every episode and step that can influence what it reports: its training episodes and any
episode that selects the reported policy (the keeper's test and confirmation episodes, a peer's evaluation episodes);
held-out episodes are never counted. ``summary.json``'s ``counting`` says in words what that interaction informs, and
its ``train_*_total`` and ``selection_*_total`` split it.

**Selection.** ``--select keeper`` (the default of every mode with a keeper): the keeper's counted test and
confirmation episodes choose the kept table, which the run reports as its selected policy. ``--select none`` (a
learner whose read-out table the keeper would judge: ``q-learning``, ``lm-policy``): no keeper episode is played, and
the run reports its final policy, measured on the held-out seeds :data:`HELDOUT_POINTS` times over the run
(:func:`heldout_due`) and at its end. ``--mode peer`` takes ``none`` only and selects through its own option
(``--peer-select eval``). Every summary reports the final policy's held-out mean (``final_heldout_mean``) and, for a
run that selects with counted episodes, the selected policy's (``selected_heldout_mean``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UserError
from .base import ModeBase

if TYPE_CHECKING:
    from ..config import TrainConfig
    from .base import Mode

__all__ = ["KEEPER", "NONE", "HELDOUT_POINTS", "select_choices", "select_of", "counting_of", "check_select",
           "heldout_due", "keeper_is_method"]

KEEPER = "keeper"
NONE = "none"
HELDOUT_POINTS = 20
"""``--select none``: the held-out measurements of the final policy per run (evenly spaced over ``--iterations``,
never counted), as a peer's curve has one per iteration."""


def select_choices(mode: Mode) -> tuple[str, ...]:
    """The ``--select`` values ``mode`` takes, its default first (a plug-in mode without the base class: keeper)."""
    return tuple(mode.selects if isinstance(mode, ModeBase) else getattr(mode, "selects", (KEEPER,)))


def select_of(mode: Mode, cfg: TrainConfig) -> str:
    """The run's selection: a mode's own rule where it has one (the peer's ``--peer-select``), else ``--select``,
    else the mode's default."""
    own = getattr(mode, "selection", None)  # a mode that selects by an option of its own (the peer mode)
    if callable(own):
        return str(own(cfg))
    return cfg.select or select_choices(mode)[0]


def keeper_is_method(mode: Mode) -> bool:
    """Whether the run's reported table is the method's own result (table, direct, reward, advisor: the keeper is
    how the method searches), so that its final policy is the kept table; False for a learner whose read-out table
    the keeper only judges (its final policy is the last read-out), and for the peer (its last network)."""
    return select_choices(mode) == (KEEPER,)


def counting_of(mode: Mode, cfg: TrainConfig) -> str:
    """What the run's counted interaction informs, in words (``summary.json``'s ``counting``)."""
    own = getattr(mode, "counting", None)
    if callable(own):
        return str(own(cfg))
    return "every counted episode: training episodes and the keeper's test and confirmation episodes"


def on_policy_counting(cfg: TrainConfig) -> str:
    """What an on-policy learner's counted interaction informed: it cannot learn from the keeper's greedy-table
    episodes, so under ``--select keeper`` they are charged without teaching it."""
    if cfg.select == "none":
        return "every counted episode is a training episode of its on-policy learner; no keeper episodes"
    return ("its on-policy learner's training episodes, and the keeper's test and confirmation episodes, which "
            "choose the kept table: charged, though an on-policy learner cannot learn from them")


def check_select(mode: Mode, cfg: TrainConfig) -> None:
    """Refuse a ``--select`` the mode does not take, and ``--patience`` without a keeper (one line each)."""
    choices = select_choices(mode)
    if cfg.select is not None and cfg.select not in choices:
        why = ("its network is the run's policy; it selects through --peer-select eval" if choices == (NONE,) else
               "its keeper is how the method searches (the kept table is its result)")
        raise UserError(f"bad --select {cfg.select} for --mode {mode.name}: {why}; accepted with --mode {mode.name}: "
                        f"{', '.join(choices)}")
    if select_of(mode, cfg) == NONE and cfg.patience and KEEPER in choices:
        raise UserError(f"--patience {cfg.patience} counts iterations without a new kept table, and --select none "
                        "keeps none (it reports the final policy); drop --patience or give --select keeper")


def heldout_due(iteration: int, iterations: int, points: int = HELDOUT_POINTS) -> bool:
    """Whether ``--select none`` measures the final policy on the held-out seeds after ``iteration``: ``points``
    measurements evenly spaced over ``iterations`` (every iteration when there are fewer), the last one included."""
    if iteration >= iterations or points >= iterations:
        return True
    return iteration * points // iterations > (iteration - 1) * points // iterations
