"""The run directory ``logs/<env-id>/<run-id>/``: every path in it, and the readers and writers of its files.

This module is the one owner of a run directory's layout: no other module of the package names one of its files
(``tests/test_run_files.py`` checks that no other module holds one of :data:`RUN_FILE_NAMES` as a string). The
others ask a :class:`RunDir` for a path (``rd.events``, ``rd.policy_file(3)``) or a record (``rd.load_events()``).

``config.json`` carries ``schema_version``, the layout of the directory (:data:`SCHEMA_VERSION`). A reader checks it
(:func:`config_of`): a directory written before the key existed is layout 1, read through :data:`UPGRADES` (the one
mapping of older layouts to this one), and a newer or unknown version is refused in one line naming it.

A new run is written into a hidden sibling folder first (:meth:`RunDir.stage`), its whole ``config.json`` included,
and renamed into place (:meth:`RunDir.publish`): a run directory is never seen without its configuration, so one
killed at any moment from then on resumes.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..clients.transcript import read_transcript
from ..errors import PolicyFileError, UserError
from ..schema.aliases import file_keys
from ..storage.locks import HOLDER_FILE, LOCK_FILE  # the lock's own files: storage/locks.py writes and reads them
from ..storage.runlog import (
    check_fields,
    current_umask,
    read_json,
    read_json_object,
    read_jsonl,
    run_id_problem,
    slug,
    unfinished_writes,
    write_json_atomic,
)
from .schema import EVENT_FIELDS, SCHEMA_KEY, SCHEMA_VERSION, UPGRADES, Summary, config_of, event_line, summary_record
from .view import RunState, RunView, state_from, view_of

if TYPE_CHECKING:
    from ..envs.spec import EnvSpec
    from ..policy import TablePolicy

__all__ = ["RunDir", "RunState", "RunView", "event_line", "summary_record", "RUN_FILE_NAMES", "SCHEMA_VERSION",
           "SCHEMA_KEY", "UPGRADES", "config_of", "is_run_dir", "run_dir_of", "load_run_policy", "load_settings",
           "experiment_settings", "CONFIG", "EVENTS", "TRANSCRIPTS", "SUMMARY", "BEST_POLICY", "CHECKPOINT",
           "POLICIES", "PROGRESS_CSV", "LOCK_FILE", "HOLDER_FILE"]

CONFIG = "config.json"
EVENTS = "events.jsonl"
TRANSCRIPTS = "transcripts.jsonl"
SUMMARY = "summary.json"
BEST_POLICY = "best_policy.json"
CHECKPOINT = "checkpoint.npz"
POLICIES = "policies"
TRAINING_PNG = "training.png"
TESTING_PNG = "testing.png"
PROGRESS_CSV = "progress.csv"
COMPARE_LOG = "compare.log"
COMPARE_ERROR = "compare_error.json"
PEER_POLICY, PEER_WEIGHTS = "peer_policy.json", "peer_policy.safetensors"  # a peer's network (--mode peer)
_POLICY_PREFIX = "iter_"
_TENSORBOARD_PREFIX = "events"  # tensorboardX adds ``.out.tfevents.<time>.<host><suffix>``

RUN_FILE_NAMES = (CONFIG, EVENTS, TRANSCRIPTS, SUMMARY, BEST_POLICY, CHECKPOINT, POLICIES, TRAINING_PNG, TESTING_PNG,
                  PROGRESS_CSV, LOCK_FILE, HOLDER_FILE, COMPARE_LOG, COMPARE_ERROR, PEER_POLICY, PEER_WEIGHTS)
"""The names of a run directory's own files and folders (a writer of ``--log`` keeps its folder, named after it;
a ``compare`` run adds its console log and, when it failed, its error)."""

_STAGED = ".starting"
"""The suffix of a staged run's hidden folder (:meth:`RunDir.stage`)."""

_LINKING_WRITERS = frozenset({"wandb"})
"""Folders of a run directory whose writer (a library) makes symbolic links of its own inside them."""

_BACKEND_IN_RUN_ID = 80
"""At most this many characters of the backend's name go into a default run id: a ``replay:PATH`` names a whole path,
and a name over the file system's 255 bytes (with the staging prefix and suffix) could not be created."""


def _remove_abandoned(base: Path) -> list[Path]:
    """Remove the staged runs in ``base`` whose process ended before publishing them (``kill -9`` included); returns
    them. A staged folder is abandoned when its holder's note says its run locked it and nobody holds that lock now
    (the kernel releases the lock of a process that ends in any way); it is removed while this process holds its
    lock, so a live run's folder is never touched, nor one whose run has not locked it yet."""
    from filelock import FileLock

    try:
        staged = sorted(p for p in base.iterdir() if p.name.startswith(".") and p.name.endswith(_STAGED))
    except OSError:
        return []
    removed = []
    for folder in staged:
        lock_file = folder / LOCK_FILE
        try:
            if folder.is_symlink() or not (folder / HOLDER_FILE).is_file() or lock_file.is_symlink():
                continue
            lock = FileLock(str(lock_file), timeout=0)
            lock.acquire(timeout=0)
        except Exception:  # filelock's Timeout: its run is alive; OSError: not ours to open
            continue
        try:
            shutil.rmtree(folder)
            removed.append(folder)
        except OSError:
            pass
        finally:
            lock.release()
    return removed


class RunDir:
    """``logs/<env-id>/<run-id>/``: the paths of the contract's files, and their readers and writers."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._wanted: Path | None = None
        """Where a staged run goes when it is published (None once it is in place)."""

    # ------------------------------------------------------------------ creating one
    @classmethod
    def stage(cls, logs_dir: Path, env_id: str, backend: str, seed: int, run_id: str | None = None) -> RunDir:
        """A new run's folder, hidden beside where it will be (``logs/<env-id>/.<run-id>.<random>.starting``)
        until :meth:`publish` renames it into place; a bad ``run_id`` is a :class:`UserError`. The folder gets the
        mode a new folder gets under the umask (not ``mkdtemp``'s 0700)."""
        base = Path(logs_dir) / slug(env_id)
        if run_id is None:
            name = slug(backend)[:_BACKEND_IN_RUN_ID].strip("-")
            run_id = f"{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}_{name}_s{seed}"
        problem = run_id_problem(run_id)
        if problem:
            raise UserError(f"bad --run-id {run_id!r}: {problem}; accepted a non-empty name without path separators "
                            "or control characters, not made only of dots")
        try:
            base.mkdir(parents=True, exist_ok=True)
            staged = cls(Path(tempfile.mkdtemp(prefix=f".{run_id}.", suffix=_STAGED, dir=base)))
            os.chmod(staged.path, 0o777 & ~current_umask())
            staged.policies.mkdir()
        except OSError as exc:
            raise UserError(f"cannot create the run directory {base / run_id}: {exc.strerror}; choose --logs-dir") \
                from None
        staged._wanted = base / run_id
        return staged

    def publish(self) -> Path:
        """Rename a staged run into place (``RUN_ID``, or ``RUN_ID-2``, ... when taken); returns its path."""
        wanted = self._wanted
        if wanted is None:
            return self.path
        path, k = wanted, 1
        while path.exists():
            k += 1
            path = wanted.with_name(f"{wanted.name}-{k}")
        os.rename(self.path, path)
        self.path, self._wanted = path, None
        return path

    def remove_abandoned(self) -> list[Path]:
        """Remove, beside this run, the staged folders of runs killed before they were published (what a started
        run does: a refused one changes nothing); returns them (:func:`_remove_abandoned`)."""
        return _remove_abandoned(self.path.parent)

    def discard(self) -> None:
        """Remove a staged run that never started (and ``logs/<env-id>/`` when it was its only folder)."""
        if self._wanted is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)
        try:
            self.path.parent.rmdir()
        except OSError:
            pass

    @classmethod
    def create(cls, logs_dir: Path, env_id: str, backend: str, seed: int, run_id: str | None = None) -> RunDir:
        """A new, empty run directory in place at once (:meth:`stage` then :meth:`publish`)."""
        rd = cls.stage(logs_dir, env_id, backend, seed, run_id)
        rd.publish()
        return rd

    # ------------------------------------------------------------------ paths
    config = property(lambda self: self.path / CONFIG)
    events = property(lambda self: self.path / EVENTS)
    transcripts = property(lambda self: self.path / TRANSCRIPTS)
    summary = property(lambda self: self.path / SUMMARY)
    best_policy = property(lambda self: self.path / BEST_POLICY)
    checkpoint = property(lambda self: self.path / CHECKPOINT)
    policies = property(lambda self: self.path / POLICIES)
    training_png = property(lambda self: self.path / TRAINING_PNG)
    testing_png = property(lambda self: self.path / TESTING_PNG)
    progress_csv = property(lambda self: self.path / PROGRESS_CSV)
    tensorboard_prefix = property(lambda self: self.path / _TENSORBOARD_PREFIX)
    lock_files = property(lambda self: (self.path / LOCK_FILE, self.path / HOLDER_FILE))
    compare_log = property(lambda self: self.path / COMPARE_LOG)
    compare_error = property(lambda self: self.path / COMPARE_ERROR)
    network_policy = property(lambda self: (self.path / PEER_POLICY, self.path / PEER_WEIGHTS))

    def writer_folder(self, name: str) -> Path:
        """The folder a ``--log`` writer keeps for itself, named after it (``wandb``)."""
        return self.path / name

    def policy_file(self, iteration: int) -> Path:
        return self.policies / f"{_POLICY_PREFIX}{iteration:04d}.json"

    def iteration_policies(self) -> dict[int, Path]:
        """The per-iteration policy files, by iteration."""
        out: dict[int, Path] = {}
        for p in self.policies.glob(f"{_POLICY_PREFIX}*.json"):
            number = p.stem[len(_POLICY_PREFIX):]
            if number.isdigit():
                out[int(number)] = p
        return dict(sorted(out.items()))

    def prune_after(self, iteration: int) -> None:
        """Delete the policy files of iterations after ``iteration`` (the last checkpoint's): the files agree with
        the checkpoint again (an interrupted run's summary, a resume)."""
        for k, p in self.iteration_policies().items():
            if k > iteration:
                p.unlink(missing_ok=True)

    def unfinished_writes(self) -> list[Path]:
        """The temporary files that a killed process left of its last atomic writes here (a checkpoint of a large
        table is hundreds of MB): of the run's own files and of its policy files only, never a file of another
        writer. The caller holds the run directory's lock."""
        own = set(RUN_FILE_NAMES)
        return (unfinished_writes(self.path, own.__contains__)
                + unfinished_writes(self.policies, lambda name: name.startswith(_POLICY_PREFIX)))

    def check_no_links(self) -> None:
        """Refuse (:class:`UserError`, one line) a run directory that holds a symbolic link anywhere inside it:
        whatever resumes or writes a run reads, replaces and deletes files there, never through a link.

        The one exception is the inside of ``wandb/`` (W&B's own offline run, which links its logs itself and is
        written only by W&B); ``wandb`` itself must not be a link.
        """
        for root, dirs, files in os.walk(self.path):
            if Path(root) != self.path and Path(root).relative_to(self.path).parts[0] in _LINKING_WRITERS:
                continue
            for name in sorted(dirs + files):
                p = Path(root) / name
                if p.is_symlink():
                    raise UserError(f"{p} is a symbolic link (to {os.readlink(p)}); a run directory must hold its "
                                    "own files, so nothing is written or deleted through a link: replace the link "
                                    "with the file or folder itself")

    # ------------------------------------------------------------------ readers and writers
    def write_config(self, record: Mapping[str, Any]) -> None:
        """``config.json``, whole, with this version's ``schema_version``."""
        write_json_atomic(self.config, {**record, SCHEMA_KEY: SCHEMA_VERSION})

    def load_config(self, *, lenient: bool = False) -> dict[str, Any] | None:
        """``config.json`` in this version's layout (:func:`config_of`: a newer layout is always refused); None
        when there is none, or holds no object, or, when ``lenient``, cannot be read as JSON (a scan over folders
        that may hold anything)."""
        record = read_json_object(self.config, lenient=lenient)
        return None if record is None else config_of(record, self.config)

    def write_summary(self, summary: Summary | Mapping[str, Any]) -> None:
        """Write ``summary.json`` from a :class:`~.schema.Summary` in the code's names (:func:`summary_record`)."""
        write_json_atomic(self.summary, summary_record(summary))

    def load_summary(self, *, lenient: bool = False) -> dict[str, Any] | None:
        """``summary.json``: a :class:`~.schema.Summary` with the mode's own keys (None while the run has not
        ended; see :meth:`load_config` for ``lenient``)."""
        return read_json_object(self.summary, lenient=lenient)

    def load_events(self, on_torn: Callable[[str], None] | None = None, *,
                    check: bool = True) -> list[dict[str, Any]]:
        """The ``events.jsonl`` lines as the file has them ([] without the file; the code's names of an
        :class:`~.schema.Event` come from :func:`~llm_policy_gen.schema.aliases.events_in`); ``check``: a field of
        the wrong type (:data:`~.schema.EVENT_FIELDS`, under the file's keys) is one line."""
        if not self.events.is_file():
            return []
        rows = read_jsonl(self.events, on_torn=on_torn)
        if check:
            check_fields(rows, self.events, file_keys(EVENT_FIELDS))
        return rows

    def load_transcripts(self, on_torn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
        """The ``transcripts.jsonl`` lines ([] without the file), each whole (packed lines unpacked: the one reader,
        :func:`~llm_policy_gen.clients.transcript.read_transcript`), their computed fields checked."""
        return read_transcript(self.transcripts, on_torn) if self.transcripts.is_file() else []

    def read(self, *, check: bool = True) -> RunView:
        """The whole run in the code's words (:class:`~.view.RunView`): the one way to read a run's records; a
        broken file is a :class:`UserError` naming it (``check``: the events' field types too)."""
        return view_of(self.path, self.load_config(), self.load_summary(), self.load_events(check=check))

    def state(self) -> RunState:
        """New, stale, started, interrupted, failed or finished (:class:`~.view.RunState`): the one rule of done.
        A damaged or newer ``config.json`` reads as stale, a damaged ``summary.json`` as started."""
        return self.survey()[0]

    def survey(self) -> tuple[RunState, dict[str, Any] | None, dict[str, Any] | None]:
        """:meth:`state`, with the ``config.json`` record and the ``summary.json`` it read (None where it read
        none): a scan that needs them too reads each file once."""
        if not self.path.exists():
            return RunState.NEW, None, None
        try:
            record = self.load_config(lenient=True)
        except UserError:  # a layout newer than this version reads: not a result of this version
            return RunState.STALE, None, None
        summary = self.load_summary(lenient=True) if record is not None else None
        return state_from(record, summary), record, summary

    def missing(self) -> list[str]:
        """The names of the contract's files this directory lacks (the report says what it leaves out)."""
        best = () if self.network_policy[0].is_file() else (self.best_policy,)  # a peer's policy is its network
        return [p.name for p in (self.config, self.events, self.summary, self.transcripts, *best) if not p.is_file()]


def load_settings(path: Path | str) -> dict[str, Any]:
    """Settings from a ``--config`` file (TOML, or a run's ``config.json`` read through :func:`config_of`)."""
    from ..storage.config_files import load_config_file

    return load_config_file(path, upgrade=config_of)


def experiment_settings(path: Path | str) -> dict[str, Any]:
    """:func:`load_settings` for ``train --config``: a run's ``config.json`` whose environment spec has changed since
    the run gets the env id that makes the recorded environment today
    (:func:`~llm_policy_gen.envs.catalog.recorded_spec_id`), said on stderr, as an old backend name gets today's."""
    settings = load_settings(path)
    record = read_json(Path(path)) if Path(path).suffix.lower() == ".json" else None
    spec = record.get("env_spec") if isinstance(record, dict) else None
    env_id = settings.get("env_id")
    if isinstance(spec, dict) and isinstance(spec.get("kwargs"), dict) and isinstance(env_id, str):
        from ..envs.catalog import recorded_spec_id

        kwargs = settings.get("env_kwargs") if isinstance(settings.get("env_kwargs"), dict) else None
        today = recorded_spec_id(env_id, spec["kwargs"], kwargs)
        if today != env_id:
            print(f"note: {path} ran {env_id} with {spec['kwargs']}; that environment is {today} today, which this "
                  "run uses", file=sys.stderr)
            settings["env_id"] = today
    return settings


def is_run_dir(path: Path | str) -> bool:
    """``path`` holds a run (its events or summary, or a configuration beside a policies folder)."""
    rd = RunDir(Path(path))
    return rd.events.is_file() or rd.summary.is_file() or (rd.config.is_file() and rd.policies.is_dir())


def run_dir_of(target: Path | str) -> RunDir | None:
    """The run directory a run directory or one of its policy files belongs to (None: no ``config.json`` there)."""
    p = Path(target)
    folder = p if p.is_dir() else p.parent
    if not p.is_dir() and folder.name == POLICIES:  # RUN/policies/iter_NNNN.json
        folder = folder.parent
    rd = RunDir(folder)
    return rd if rd.config.is_file() else None


def load_run_policy(target: str | Path, env_id: str | None = None) -> tuple[TablePolicy, EnvSpec | None]:
    """The best table of a run directory (or a policy file) and, when known, the run's env spec.

    ``env_id`` is the ``--env`` the command line named: a policy or run whose environment is ``module:EnvId`` is
    refused unless it names the same (see :func:`~llm_policy_gen.envs.catalog.check_env_named`), before anything
    is imported. A run's ``config.json`` of a newer layout is refused (:func:`config_of`).
    """
    from ..envs.catalog import check_env_named
    from ..envs.spec import EnvSpec
    from ..policy import TablePolicy

    path = Path(target)
    if path.is_dir():
        path = RunDir(path).best_policy
        if not path.is_file():
            raise PolicyFileError(f"{target} holds no {BEST_POLICY}; give a run directory or a policy file")
    policy = TablePolicy.load(path)
    check_env_named(policy.env_id, env_id, f"the policy {path}")
    spec: EnvSpec | None = None
    cfg = RunDir(path.parent).config
    if cfg.is_file():
        record = read_json(cfg)
        if isinstance(record, dict):
            record = config_of(record, cfg)
        try:
            spec = EnvSpec.from_dict(record["env_spec"])
        except (KeyError, ValueError, TypeError):
            spec = None
        if spec is not None:
            check_env_named(policy.env_id, env_id, f"the policy {path}", spec.env_id)
    if spec is None:
        try:
            from ..envs import get_spec  # imported here: envs is heavier than a policy file
            from ..envs.tailor import apply_env_kwargs

            spec = get_spec(policy.env_id)
            if policy.env_kwargs is not None and policy.env_kwargs != spec.kwargs:
                spec = apply_env_kwargs(spec, policy.env_kwargs)  # the environment the table was made for
        except UserError:
            spec = None
    return policy, spec
