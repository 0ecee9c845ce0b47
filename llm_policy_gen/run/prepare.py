"""Everything a run checks before it writes anything, in one place for ``train``, ``resume`` and ``compare``.

:func:`prepare` resolves a configuration (the environment's spec with its overrides and train defaults, the default
backend) and refuses what no run could use (an unknown mode, answer format or backend, a broken price file), with
one line each. :func:`check_backend` goes one step further for ``compare``: it builds the backend as a run would (a
missing key or SDK is refused here), in a scratch folder, without starting anything.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..backends import BACKENDS, default_backend_spec, is_client, is_llm, parse_backend_spec
from ..config import TrainConfig
from ..envs import get_spec
from ..envs.spec import EnvSpec
from ..errors import UserError
from ..formats import FORMATS, table_format_names
from ..modes import MODES
from ..modes.base import Mode
from ..pricing import load_prices

__all__ = ["Prepared", "prepare", "resolve_spec", "check_backend"]


@dataclass
class Prepared:
    """A configuration a run can start from: the resolved settings, the environment's spec, the mode, and the notes
    to say before the run starts."""

    cfg: TrainConfig
    spec: EnvSpec
    mode: Mode
    backend: str
    """The backend's registry name (``openai`` of ``openai:gpt-4o``)."""
    notes: list[str] = field(default_factory=list)


def resolve_spec(cfg: TrainConfig) -> EnvSpec:
    """The env spec with the config's overrides (env kwargs, dims, bins, binning) applied."""
    from ..envs.tailor import apply_dims_bins, apply_env_kwargs

    spec = apply_env_kwargs(get_spec(cfg.env_id), cfg.env_kwargs)
    if cfg.dims is not None or cfg.bins is not None:
        spec = apply_dims_bins(spec, cfg.dims, cfg.bins)
    if cfg.binning:
        spec = spec.with_overrides(binning=cfg.binning)
    return spec.validate()


def prepare(cfg: TrainConfig, spec: EnvSpec | None = None) -> Prepared:
    """``cfg`` checked and resolved (see the module doc). ``spec``: the recorded spec of a run being resumed, whose
    configuration is already resolved; without it the spec comes from ``cfg`` and its train defaults apply."""
    notes: list[str] = []
    if spec is None:
        spec = resolve_spec(cfg)
        if spec.train_defaults:
            cfg = cfg.with_env_defaults(spec.train_defaults)
    if cfg.mode not in MODES:
        raise MODES.unknown(cfg.mode)
    asks_backend = MODES.entry(cfg.mode).info.get("backend") is not False
    if not asks_backend:  # a mode that asks no model for answers
        if cfg.backend not in (None, "offline"):
            raise UserError(f"--mode {cfg.mode} asks no backend for answers; drop --backend {cfg.backend}")
        if cfg.backend is None:
            cfg = cfg.updated({"backend": "offline"}, "mode without backend")
    if cfg.backend is None:
        name, why = default_backend_spec()
        cfg = cfg.updated({"backend": name}, "default backend")
        notes.append(f"backend: {name} ({why})")
    name, _ = parse_backend_spec(cfg.backend or "offline")
    if cfg.output_format != "auto":
        if cfg.output_format not in FORMATS:
            raise FORMATS.unknown(cfg.output_format, accepted=["auto", *table_format_names()])
        if FORMATS.entry(cfg.output_format).info.get("table") is False:
            raise UserError(f"bad --output-format {cfg.output_format!r}: it answers one action, not a table; accepted: "
                            f"auto, {', '.join(table_format_names())}")
    mode: Mode = MODES.load(cfg.mode)()
    _check_refine(cfg, name, mode)
    notice = BACKENDS.entry(name).info.get("notice")
    if notice and asks_backend:
        notes.append(f"backend: {name} -- {notice}")
    if cfg.temperature is not None and not is_llm(name):
        notes.append(f"note: --temperature has no effect on {name} (no language model is sampled)")
    load_prices(cfg.prices_file)  # a missing or broken price file is refused before anything starts
    return Prepared(cfg, spec, mode, name, notes)


def _check_refine(cfg: TrainConfig, name: str, mode: Mode) -> None:
    """``--refine`` tunes the numbers of rules a model wrote: it needs rules answers from an LLM (or replay)."""
    if not cfg.refine:
        return
    if not is_client(name):
        raise UserError(f"--refine {cfg.refine} needs an LLM backend (or replay:PATH) to write the rules it refines, "
                        f"not {name!r}; give --backend PROVIDER[:MODEL] or drop --refine")
    if mode.needs_session:
        raise UserError(f"--refine {cfg.refine} does not apply to --mode {mode.name}, which asks the model for each "
                        "action; use it with --mode table")
    if cfg.output_format != "rules":
        raise UserError(f"--refine {cfg.refine} needs --output-format rules (it tunes the numbers of rules), not "
                        f"{cfg.output_format!r}")


def check_backend(prepared: Prepared) -> str | None:
    """Build ``prepared``'s run in a scratch folder without starting it (its backend, key and SDK included);
    returns where its calls will go and where that base URL and the key came from (None for no server)."""
    from ..console import Console
    from ..runlog import RunDir
    from .services import Run

    cfg = prepared.cfg
    with tempfile.TemporaryDirectory(prefix="llm-policy-gen-check-") as tmp:
        console = Console(cfg.iterations, cfg.backend or prepared.backend, enabled=False, sink=lambda s: None)
        run = Run(cfg, prepared.spec, prepared.mode, RunDir(Path(tmp)), console)
        run.logger.close()
        run.collector.close()
        return run.endpoint
