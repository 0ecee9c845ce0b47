"""The environment a configuration runs on: its spec resolved from the configuration, and a custom one probed.

:func:`resolve_spec` applies the configuration's overrides to the environment's spec; :func:`probe_outputs` plays one
episode of an environment without a shipped spec before anything is written. :func:`~.prepare.prepare` asks both;
``compare`` and the sweep's plan resolve their runs' specs here too.
"""

from __future__ import annotations

from ..config import TrainConfig
from ..envs import get_spec
from ..envs.spec import EnvSpec

__all__ = ["resolve_spec", "probe_outputs"]


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
