"""One run, from a configuration to its directory: discretize, collect, prompt, propose, validate, keep, log.

- :mod:`.files`: the run directory, every path in it and the readers and writers of its files;
- :mod:`.schema`: the keys of its records (an ``events.jsonl`` line, ``summary.json``);
- :mod:`.environment`: the environment's spec a configuration resolves to;
- :mod:`.prepare`: the checks every run makes before it writes anything (``train``, ``resume``, ``compare``);
- :mod:`.checkpoint`: the checkpoint file;
- :mod:`.parts`: what a run owns, built once (the base of :class:`Run`), and their state in the checkpoint;
- :mod:`.services`: :class:`Run`, the services a mode may use;
- :mod:`.records`: the counters, the checkpoint state, events, summary and config records;
- :mod:`.stop`: why a run stopped;
- :mod:`.driver`: the iteration loop for every mode;
- :mod:`.start` and :mod:`.resume`: ``train`` and ``train --resume`` (:mod:`.resume_checks`: what a resume refuses).

The names below are imported when first used (PEP 562), so that reading a run directory (:mod:`.files`, which the
report, the plots, the sweep, the loggers and the lock use) does not import the whole run (nor import it in a
circle). ``run.prepare`` and ``run.resume`` stay the functions, as they were, when their modules are imported.
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..backends.factory import default_cache_dir
    from ..config import resume_options
    from .environment import resolve_spec
    from .prepare import Prepared, prepare
    from .records import RunResult
    from .resume import resume
    from .services import Run
    from .start import check_backend, train
    from .stop import StopKind, StopReason

__all__ = ["RunResult", "Run", "Prepared", "prepare", "check_backend", "resolve_spec", "train", "resume",
           "default_cache_dir", "resume_options", "StopKind", "StopReason"]

_WHERE = {"resume_options": "..config", "default_cache_dir": "..backends.factory", "Prepared": ".prepare",
          "check_backend": ".start", "prepare": ".prepare", "resolve_spec": ".environment", "RunResult": ".records",
          "resume": ".resume", "Run": ".services", "train": ".start", "StopKind": ".stop", "StopReason": ".stop"}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(where, __name__), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """The package, whose ``prepare`` and ``resume`` stay the functions when their modules are imported (the import
    system sets a submodule as its package's attribute)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and name in _WHERE:
            return  # the module is in sys.modules under its full name; the package's name is the function's
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
