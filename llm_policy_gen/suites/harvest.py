"""A finished run made a suite record: its figures read through the run-directory reader (``RunDir.read()``).

:func:`record_of` is the one place a cell's run becomes a :class:`~.store.SuiteRecord`; it refuses a run that is not
finished (``RunDir.state()``: an interrupted, failed or stale run is never a result). :func:`code_version` names the
code that made it: ``<package version>+<git short sha>``, with ``-dirty`` when the checkout has changes, the version
alone outside a git checkout.
"""

from __future__ import annotations

import shlex
import subprocess
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from .. import __version__
from ..run.files import RunDir
from ..run.view import RunState, RunView
from .cells import Cell
from .definition import Suite
from .extra_tables import figures_of
from .store import SuiteRecord

__all__ = ["code_version", "record_of", "result_of", "curve_of", "command_of"]


@lru_cache(maxsize=1)
def code_version() -> str:
    """``0.9.0+45a324f`` (``-dirty`` when the package's checkout has changes); the version alone outside git."""
    root = Path(__file__).resolve().parents[2]

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=20,
                                  check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    if not (root / ".git").exists():
        return __version__
    sha = git("rev-parse", "--short", "HEAD")
    if not sha:
        return __version__
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{__version__}+{sha}{'-dirty' if dirty else ''}"


def _number(value: Any) -> float | int | None:
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _charged_steps(summary: dict[str, Any]) -> float | int | None:
    """The steps a record charges (issue 62's one counting rule): the run's counted steps and, for a learner that
    steps its own environments, the steps of episodes still in progress when it ended, which it learned from though
    the run counts an episode only once it ends (``steps_in_progress``)."""
    steps = _number(summary.get("env_steps_total"))
    extra = _number(summary.get("steps_in_progress"))
    return steps + extra if steps is not None and extra else steps


def result_of(view: RunView) -> dict[str, Any]:
    """The record's ``result`` (the contract's keys; None where the run has none) from a finished run's view."""
    s = view.summary
    llm = bool(view.fact("is_llm", False))
    model = s.get("model") or None
    return {
        "heldout_mean": _number(s.get("best_heldout_mean")),
        "final_heldout_mean": _number(s.get("final_heldout_mean")),
        "selected_heldout_mean": _number(s.get("selected_heldout_mean")),
        "heldout_within": _number(s.get("heldout_within")),
        "heldout_episodes": _number(s.get("best_heldout_episodes")),
        "episodes": _number(s.get("episodes_total")),
        "env_steps": _charged_steps(s),
        "steps_in_progress": _number(s.get("steps_in_progress")),
        "iterations": _number(s.get("iterations")),
        "wall_s": _number(s.get("wall_s")),
        "cpu_s": _number(s.get("cpu_s")),
        "calls": _number(s.get("llm_calls")) if llm else 0,
        "tokens_in": _number(s.get("input_tokens")),
        "tokens_out": _number(s.get("output_tokens")),
        "cost_usd": _number(s.get("cost_usd")),
        "stop_reason": s.get("stop_reason"),
        "reward_threshold": view.threshold,
        "model": model if llm else None,
        "peer_source": s.get("hyperparameters_source") or None,
        "mode": view.mode,
        "backend": view.backend_spec if llm else view.backend,
    }


def curve_of(view: RunView) -> list[list[float | None]]:
    """``[env_steps, episodes, heldout_mean]`` after each iteration (the reported policy's held-out mean)."""
    out: list[list[float | None]] = []
    for e in view.events:
        y = e.get("best_heldout_mean", e.get("heldout_mean"))
        steps, episodes = e.get("env_steps_total"), e.get("episodes_total")
        if steps is None and episodes is None:
            continue
        out.append([_number(steps), _number(episodes), _number(y)])
    return out


def command_of(view: RunView) -> str:
    """The command line that started the run (``config.json``'s ``argv``, secrets redacted), as a user types it."""
    from ..clients.keys import redact

    argv = view.record.get("argv")
    if not isinstance(argv, list) or not argv:
        return ""
    words = [str(a) for a in argv[1:]]
    return redact(shlex.join(["llm-policy-gen", *words]))


def record_of(suite: Suite, cell: Cell, command: str | None, source: str = "run") -> SuiteRecord:
    """The record of ``cell``'s finished run (``command`` None: the command that started the run, for a run adopted
    from disk); a run that is not finished is a ValueError (a bug of the caller)."""
    assert cell.run is not None and cell.key
    rd = RunDir(cell.run.run_dir)
    view = rd.read(check=False)
    if view.state is not RunState.FINISHED:
        raise ValueError(f"{cell.name}: the run in {cell.run.run_dir} is {view.state.value}, not a result")
    adopted = command is None
    command = command_of(view) if command is None else command
    # an adopted run was made by other code than this: its config.json names the package version, not the commit
    code = f"{view.record.get('version') or 'unknown'}+unknown (adopted)" if adopted else code_version()
    return SuiteRecord(suite=suite.name, task=cell.task.key, env_id=cell.task.env_id, method=cell.method.label,
                       entry=cell.method.entry, seed=cell.seed, cell=cell.key, budget=dict(cell.budget),
                       settings=dict(cell.settings), result={**result_of(view), **figures_of(suite, rd, view)},
                       curve=curve_of(view),
                       code=code, made=datetime.now(UTC).isoformat(timespec="seconds"), source=source,
                       command=command)
