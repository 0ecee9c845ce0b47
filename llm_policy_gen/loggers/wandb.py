"""``--log wandb``: the per-iteration scalars as an offline Weights & Biases run, as CleanRL's ``--track`` does.

The run lives in ``RUN_DIR/wandb/offline-run-*/`` (W&B's cache, config, data and artifact folders in
``RUN_DIR/wandb/`` too, not under ``~/.cache`` or ``~/.config``) and never talks to a server
(``wandb sync RUN_DIR/wandb/offline-run-*`` uploads it later, with your own W&B login). It gets the same scalars
as ``progress.csv`` and TensorBoard (:func:`~llm_policy_gen.loggers.writers.scalars`, step = iteration) and, as its
configuration, the ``config`` object of the run's ``config.json`` (base URLs without ``user:password@``), with
every configured key scrubbed once more.

W&B captures much more by default; all of it is turned off, so that no key or URL password can reach its files:

=============================  ===================================================================================
``x_disable_meta``             no ``wandb-metadata.json`` facts: command line (``args``), program, host, user, ...
``disable_code``, ``save_code`` no copy of the code
``disable_git``                no git remote (a URL that may hold a token), commit or diff
``x_disable_stats``            no system metrics sampling
``x_disable_machine_info``     no machine description
``x_save_requirements``        no ``requirements.txt`` of the environment
``console="off"``              no copy of stdout / stderr
``disable_job_creation``       no W&B Launch job artifact
=============================  ===================================================================================

W&B's own library is the extra ``wandb``; without it ``--log wandb`` is one line, exit 2. A resumed run adds a new
offline run in the same folder, starting at the first redone iteration.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import missing_extra
from ..run.files import RunDir
from .writers import scalars

__all__ = ["WandbWriter", "WANDB_SETTINGS"]

#: What W&B may capture besides what we log: nothing (see the module docstring).
WANDB_SETTINGS: dict[str, Any] = {
    "mode": "offline",
    "x_disable_meta": True,
    "disable_code": True,
    "save_code": False,
    "disable_git": True,
    "x_disable_stats": True,
    "x_disable_machine_info": True,
    "x_save_requirements": False,
    "console": "off",
    "disable_job_creation": True,
    "silent": True,
}


def _run_config(run_dir: Path) -> dict[str, Any]:
    """The redacted settings of the run, from its config.json (which the engine writes before any logger starts)."""
    from ..clients.keys import redact_all

    record = RunDir(run_dir).load_config(lenient=True)
    config = record.get("config") if record is not None else None
    return dict(redact_all(config)) if isinstance(config, dict) else {}


#: W&B's own folders (``~/.cache/wandb``, ``~/.config/wandb``, ...) by their variables, and their places in the run's
#: ``wandb/`` folder: its debug logs, settings and caches stay with the run.
WANDB_FOLDERS = {"WANDB_CACHE_DIR": "cache", "WANDB_CONFIG_DIR": "config", "WANDB_DATA_DIR": "data",
                 "WANDB_ARTIFACT_DIR": "artifacts"}


@contextmanager
def _folders_in(root: Path) -> Iterator[None]:
    """W&B's folders (:data:`WANDB_FOLDERS`) inside ``root`` while W&B starts (its service process inherits them);
    the process's variables as they were afterwards, so that another run in this process gets its own."""
    saved = {name: os.environ.get(name) for name in WANDB_FOLDERS}
    try:
        for name, sub in WANDB_FOLDERS.items():
            (root / sub).mkdir(parents=True, exist_ok=True)
            os.environ[name] = str(root / sub)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class WandbWriter:
    """One offline W&B run per process of a run directory; one ``log`` call per iteration (step = iteration)."""

    def __init__(self, run_dir: Path) -> None:
        try:
            import wandb
        except ImportError:
            raise missing_extra("--log wandb needs wandb", "wandb") from None
        self.dir = Path(run_dir)
        config = _run_config(self.dir)
        with _folders_in(RunDir(self.dir).writer_folder("wandb")):
            self._run = wandb.init(
                dir=str(self.dir), project="llm-policy-gen", group=str(config.get("env_id") or "") or None,
                name=self.dir.name, config=config, settings=wandb.Settings(**WANDB_SETTINGS), reinit="create_new",
            )

    def write(self, record: dict[str, Any]) -> None:
        values = {k: v for k, v in scalars(record).items() if k != "time/iterations"}
        self._run.log(values, step=int(record.get("iteration", 0)))

    def close(self) -> None:
        self._run.finish()
