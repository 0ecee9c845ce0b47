"""Peers: Stable-Baselines3 and sb3-contrib learners with the RL Baselines3 Zoo's tuning, as runs of the product
(``train --mode peer``, :mod:`llm_policy_gen.modes.peer`), one concept a file.

* :mod:`.zoo` -- the zoo's hyperparameters, read from the installed ``rl-zoo3`` YAML (also the bench's reader);
* :mod:`.learner` -- the library learner over the run's environments (raw observations), its state as arrays;
* :mod:`.policy` -- the trained network as a policy (``act``), its weights as safetensors beside a JSON of its facts,
  the policy file ``evaluate`` reads.

``torch``, ``stable-baselines3``, ``sb3-contrib``, ``rl-zoo3`` and ``safetensors`` are the ``peers`` extra, imported
inside the functions that need them; :func:`require_peers` turns their absence into one line (exit 2).
"""

from __future__ import annotations

import importlib.util

from ..errors import missing_extra

__all__ = ["EXTRA_MODULES", "require_peers"]

EXTRA_MODULES = ("torch", "stable_baselines3", "sb3_contrib", "rl_zoo3", "safetensors", "yaml")
"""The modules of the ``peers`` extra a peer run or its policy needs."""


def require_peers(what: str) -> None:
    """Refuse (a :class:`~llm_policy_gen.errors.UserError`, one line) when a module of the ``peers`` extra is
    missing."""
    missing = [m for m in EXTRA_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise missing_extra(f"{what} needs the peers extra ({', '.join(missing)} missing)", "peers")
