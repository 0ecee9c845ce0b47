"""The environment a configuration runs on: its spec resolved from the configuration, and a custom one probed.

:func:`resolve_spec` applies the configuration's overrides to the environment's spec; :func:`probe_outputs` plays one
episode of an environment without a shipped spec before anything is written. :func:`~.prepare.prepare` asks both;
``compare`` and the sweep's plan resolve their runs' specs here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..config import TrainConfig
from ..envs import get_spec
from ..envs.spec import EnvSpec

if TYPE_CHECKING:
    from ..discretize import ActionDiscretizer

__all__ = ["resolve_spec", "probe_outputs", "initial_table", "start_text"]


def resolve_spec(cfg: TrainConfig) -> EnvSpec:
    """The env spec with the config's overrides (env kwargs, dims, bins, binning, a neutral prior) applied."""
    from ..envs.tailor import apply_dims_bins, apply_env_kwargs

    spec = apply_env_kwargs(get_spec(cfg.env_id), cfg.env_kwargs)
    if cfg.dims is not None or cfg.bins is not None:
        spec = apply_dims_bins(spec, cfg.dims, cfg.bins)
    if cfg.binning:
        spec = spec.with_overrides(binning=cfg.binning)
    if cfg.prior == "neutral":  # no prior rule: the table starts at the default action, searches from nothing
        spec = spec.with_overrides(prior=None)
    return spec.validate()


def _starts_at_prior(cfg: TrainConfig, spec: EnvSpec) -> bool:
    return cfg.prior == "start" and spec.prior is not None and bool(spec.dims)  # as spec.prior_table() is not None


def initial_table(cfg: TrainConfig, spec: EnvSpec) -> np.ndarray:
    """The kept table a new run starts from: the spec's prior rule's table with ``--prior start``, else the spec's
    default action in every state (:func:`start_text` says which)."""
    start = spec.prior_table() if cfg.prior == "start" else None
    return spec.default_table() if start is None else start


def start_text(cfg: TrainConfig, spec: EnvSpec, actions: ActionDiscretizer, heldout_mean: float,
               episodes: int) -> str:
    """The console's first line about the table: where the kept table started and its held-out mean, so that what
    the iteration lines show next reads as a change from there."""
    if _starts_at_prior(cfg, spec):
        what = "the spec's prior rule (--prior start)"
    else:
        if cfg.prior == "neutral":
            why = "--prior neutral: no prior rule"
        elif spec.prior is None:
            why = "the spec has no prior rule"
        else:
            why = "--prior start would start at the spec's prior rule"
        what = f"'{actions.describe(spec.default_action)}' in every state (the spec's default action; {why})"
    return f"start: the kept table is {what}; held-out {heldout_mean:.1f} over {episodes} episodes"


def probe_outputs(spec: EnvSpec, seed: int) -> None:
    """One episode of the initial table of an environment without a shipped spec (a custom one, whose outputs
    nothing has checked yet), before anything is written: a non-finite reward or observation is refused here with
    exit 2, not found by the run after it made its directory."""
    from ..collect import Collector
    from ..envs.catalog import shipped_env_ids
    from ..errors import EnvOutputError, SpecError

    if spec.env_id in shipped_env_ids():
        return
    try:
        with Collector(spec, workers=1) as collector:
            collector.evaluate(spec.default_table(), [seed])
    except EnvOutputError as exc:
        raise SpecError(str(exc)) from None
