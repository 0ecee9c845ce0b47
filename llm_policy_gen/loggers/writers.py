"""The optional per-iteration writers of ``--log``: ``progress.csv`` and TensorBoard event files.

Both are :class:`~llm_policy_gen.storage.runlog.KVWriter` s that the run's
:class:`~llm_policy_gen.storage.runlog.Logger` calls after ``events.jsonl`` and the console, with the iteration's
record. Both write the same scalars, named in Stable-Baselines3's way (``namespace/name``), computed from the
record by :func:`scalars`:

====================================  =================================================================
``time/iterations``                   the iteration (also the TensorBoard step)
``time/episodes_total``               counted environment episodes (training, test and confirmation)
``time/total_timesteps``              counted environment steps
``eval/best_test_mean``               the kept table's mean on this iteration's test seeds (it decides)
``eval/heldout_mean``                 the kept table's mean on the held-out episodes (reported only), once measured
``eval/chosen_test_mean``             test mean of the candidate the keeper chose to challenge with
``eval/accepted``                     1 when a candidate replaced the kept table
``candidates/test_mean_K``            test mean of candidate K (absent when its answer was invalid)
``rollout/train_return_mean``         mean return of the training episodes (kept table + exploration)
``llm/calls``, ``llm/*_tokens``,      calls, tokens and cost of the iteration, and their running totals
``llm/cost_usd``, ``llm/*_total``
====================================  =================================================================

plus the other numbers of the record (confirmation test, prompt size, wall time, a mode's own fields).

* ``csv``: ``progress.csv`` in the run directory, one row per iteration; columns in order of first appearance, and
  a key seen for the first time rewrites the file with the wider header (as Stable-Baselines3's ``CSVOutputFormat``
  does). The file is rebuilt from ``events.jsonl`` when the writer starts, so a resumed run (whose ``events.jsonl``
  the engine has cut back to the checkpointed iterations) never repeats a row.
* ``tensorboard``: event files in the run directory (``tensorboard --logdir logs`` shows every run), written with
  tensorboardX's event-file writer (extra ``tensorboard``). Each event is written and flushed synchronously, so a
  killed run loses at most the iteration it was in. A resumed run starts a new event file that begins with a
  restart marker at the first redone iteration: TensorBoard then hides the earlier file's events from that step on,
  so no step is shown twice.

A writer that needs more than a few lines lives in its own file, registered here by one line: ``wandb``
(:mod:`llm_policy_gen.loggers.wandb`, an offline Weights & Biases run with the same scalars).

Writers are found by name in :data:`LOGGERS` (``register`` adds one); a missing optional library is a
:class:`~llm_policy_gen.errors.UserError` naming the extra to install.
"""

from __future__ import annotations

import csv
import io
import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import missing_extra
from ..registry import Registry
from ..run.files import PROGRESS_CSV, RunDir
from ..storage.runlog import KVWriter, write_bytes_atomic

__all__ = ["LOGGERS", "scalars", "make_writers", "check_writers", "CSVWriter", "TensorBoardWriter", "PROGRESS_CSV"]


#: Logger name -> "module:factory"; a factory takes the run directory and returns a KVWriter.
LOGGERS: Registry[Any] = Registry("logger", "--log")
LOGGERS.register("csv", "llm_policy_gen.loggers.writers:CSVWriter",
                 description=f"{PROGRESS_CSV}, one row per iteration")
LOGGERS.register("tensorboard", "llm_policy_gen.loggers.writers:TensorBoardWriter",
                 description="TensorBoard event files (needs the tensorboard extra)", extra="tensorboard",
                 requires="tensorboardX")
LOGGERS.register("wandb", "llm_policy_gen.loggers.wandb:WandbWriter",
                 description="an offline Weights & Biases run in RUN_DIR/wandb (needs the wandb extra)", extra="wandb",
                 requires="wandb")

#: Record key -> scalar name, in the order columns appear.
_NAMES = (
    ("iteration", "time/iterations"),
    ("episodes_total", "time/episodes_total"),
    ("env_steps_total", "time/total_timesteps"),
    ("heldout_episodes_total", "time/heldout_episodes_total"),
    ("best_test_mean", "eval/best_test_mean"),
    ("best_heldout_mean", "eval/heldout_mean"),
    ("heldout_std", "eval/heldout_std"),
    ("heldout_episodes", "eval/heldout_episodes"),
    ("test_mean", "eval/chosen_test_mean"),
    ("test_episodes", "eval/test_episodes"),
    ("accepted", "eval/accepted"),
    ("accepted_total", "eval/accepted_total"),
    ("chosen", "eval/chosen_candidate"),
    ("train_return", "rollout/train_return_mean"),
    ("train_epsilon", "rollout/explore_epsilon"),
    ("llm_calls", "llm/calls"),
    ("failed_calls", "llm/failed_calls"),
    ("input_tokens", "llm/input_tokens"),
    ("output_tokens", "llm/output_tokens"),
    ("cached_input_tokens", "llm/cached_input_tokens"),
    ("cost_usd", "llm/cost_usd"),
    ("input_tokens_total", "llm/input_tokens_total"),
    ("output_tokens_total", "llm/output_tokens_total"),
    ("cost_usd_total", "llm/cost_usd_total"),
    ("prompt_chars", "llm/prompt_chars"),
    ("n_changed", "policy/states_changed"),
    ("wall_s", "time/iteration_wall_s"),
)
#: Record keys that are not scalars of their own (lists, text, or the same number under another key).
_SKIP = {"mode", "train_returns", "test_returns", "candidate_means", "validation_errors", "notes", "confirmation",
         "heldout_mean", "valid", "candidates"}


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return None


def scalars(record: dict[str, Any]) -> dict[str, float | int]:
    """The scalars of one iteration record in the code's names (see the module docstring; a line read from
    ``events.jsonl`` goes through :func:`~llm_policy_gen.schema.aliases.events_in` first); missing and non-finite
    values left out."""
    rec = dict(record)
    out: dict[str, float | int] = {}
    for key, name in _NAMES:
        v = _number(rec.get(key))
        if v is not None:
            out[name] = v
    means = rec.get("candidate_means") or []
    for k, m in enumerate(means, start=1):
        v = _number(m)
        if v is not None:
            out[f"candidates/test_mean_{k}"] = v
    if means:
        out["candidates/valid"] = sum(_number(m) is not None for m in means)
    out["llm/validation_errors"] = len(rec.get("validation_errors") or [])
    conf = rec.get("confirmation")
    if isinstance(conf, dict):
        for key in ("diff_mean", "diff_se", "passed"):
            v = _number(conf.get(key))
            if v is not None:
                out[f"confirm/{key}"] = v
    known = {k for k, _ in _NAMES} | _SKIP
    for key, value in rec.items():
        v = _number(value)
        if key not in known and v is not None:
            out[f"mode/{key}"] = v
    return out


def _events_so_far(run_dir: Path) -> list[dict[str, Any]]:
    """The run's events.jsonl lines so far, in the code's names."""
    return RunDir(Path(run_dir)).read(check=False).events


class CSVWriter:
    """``progress.csv``: one row per iteration, Stable-Baselines3's column style (see the module docstring)."""

    def __init__(self, run_dir: Path) -> None:
        self.path = RunDir(Path(run_dir)).progress_csv
        self.keys: list[str] = []
        self.rows: list[dict[str, float | int]] = [scalars(r) for r in _events_so_far(run_dir)]
        for row in self.rows:
            self._add_keys(row)
        if self.rows or self.path.exists():
            self._rewrite()  # a resume: the rows of the checkpointed iterations, none after

    def _add_keys(self, row: dict[str, Any]) -> bool:
        new = [k for k in row if k not in self.keys]
        self.keys.extend(new)
        return bool(new)

    def _line(self, row: dict[str, Any]) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(["" if row.get(k) is None else row[k] for k in self.keys])
        return buf.getvalue()

    def _rewrite(self) -> None:
        text = (self._line({k: k for k in self.keys}) + "".join(map(self._line, self.rows))) if self.keys else ""
        write_bytes_atomic(self.path, text.encode("utf-8"))

    def write(self, record: dict[str, Any]) -> None:
        row = scalars(record)
        self.rows.append(row)
        if self._add_keys(row) or not self.path.exists():
            self._rewrite()
            return
        data = self._line(row).encode("utf-8")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            written = os.write(fd, data)
        finally:
            os.close(fd)
        if written != len(data):  # a short write (full disk): the whole file again, or the error
            self._rewrite()

    def close(self) -> None:
        return None


class TensorBoardWriter:
    """TensorBoard event files in the run directory, one scalar per name per iteration (step = iteration)."""

    def __init__(self, run_dir: Path) -> None:
        try:
            from tensorboardX.event_file_writer import EventsWriter
            from tensorboardX.proto.event_pb2 import Event, SessionLog
            from tensorboardX.summary import scalar
        except ImportError:
            raise missing_extra("--log tensorboard needs tensorboardX", "tensorboard") from None
        self._event, self._scalar = Event, scalar
        self.dir = Path(run_dir)
        done = [int(e["iteration"]) for e in _events_so_far(self.dir) if "iteration" in e]
        first = max(done, default=0) + 1
        prefix = RunDir(self.dir).tensorboard_prefix
        earlier = any(self.dir.glob(f"{prefix.name}.out.tfevents.*"))
        self.dir.mkdir(parents=True, exist_ok=True)
        # A distinct suffix per start: two writers opened in the same second must not share (and truncate) a file.
        self._writer = EventsWriter(str(prefix), f".{os.getpid()}.i{first:04d}")
        if earlier:
            # A restart marker: TensorBoard drops the events of earlier files from this step on.
            self._writer.write_event(Event(wall_time=time.time(), step=first,
                                           session_log=SessionLog(status=SessionLog.START)))
        self._writer.flush()

    def write(self, record: dict[str, Any]) -> None:
        step = int(record.get("iteration", 0))
        now = time.time()
        for name, value in scalars(record).items():
            if name == "time/iterations":
                continue
            self._writer.write_event(self._event(wall_time=now, step=step, summary=self._scalar(name, value)))
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def check_writers(names: Sequence[str]) -> None:
    """Refuse (one line naming the extra) a writer of ``names`` whose library (the entry's ``requires``) does not
    import, without opening any writer: ``train`` and a resume check this before a run directory is made or a file
    of the run changes. The library is imported, not only found: an install that is present but broken is refused
    here too, not after the run directory is made."""
    import importlib

    for name in dict.fromkeys(n.strip().lower() for n in names if n.strip()):
        entry = LOGGERS.entry(name)
        module = entry.info.get("requires")
        if not module:
            continue
        try:
            importlib.import_module(str(module))
        except ImportError:
            raise missing_extra(f"--log {name} needs {module}", str(entry.info.get("extra") or name)) from None


def make_writers(names: Sequence[str], run_dir: Path) -> list[KVWriter]:
    """The writers named in ``--log`` (each once, in the order given) for a run directory."""
    factories = [LOGGERS.load(n) for n in dict.fromkeys(n.strip().lower() for n in names if n.strip())]
    return [make(Path(run_dir)) for make in factories]  # every name checked before any writer touches the folder
