"""One run, from a configuration to its directory: discretize, collect, prompt, propose, validate, keep, log.

- :mod:`.prepare`: the checks every run makes before it writes anything (``train``, ``resume``, ``compare``);
- :mod:`.backend`: the one backend factory (a proposer, and for LLM clients the session);
- :mod:`.services`: :class:`Run`, the parts a run owns and the services a mode may use;
- :mod:`.records`: the counters, the checkpoint state, events, summary and config records;
- :mod:`.stop`: why a run stopped;
- :mod:`.driver`: the iteration loop for every mode;
- :mod:`.start` and :mod:`.resume`: ``train`` and ``train --resume``.
"""

from ..config import resume_options
from .backend import default_cache_dir
from .prepare import Prepared, check_backend, prepare, resolve_spec
from .records import RunResult
from .resume import resume
from .services import Run
from .start import train
from .stop import StopKind, StopReason

__all__ = ["RunResult", "Run", "Prepared", "prepare", "check_backend", "resolve_spec", "train", "resume",
           "default_cache_dir", "resume_options", "StopKind", "StopReason"]
