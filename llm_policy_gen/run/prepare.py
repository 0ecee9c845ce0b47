"""Everything a run checks before it writes anything, in one place for ``train``, ``resume`` and ``compare``.

:func:`prepare` resolves a configuration (the environment's spec with its overrides and train defaults, the default
backend) and refuses what no run could use (an unknown mode, answer format or backend, a broken price file), with
one line each, and settings whose arrays would not fit in memory (:mod:`llm_policy_gen.sizes`); the spec itself is
:mod:`.environment`'s. :func:`~.start.check_backend` goes one step further for ``compare``: it builds the backend
as a run would, without starting anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backends import (
    default_backend_spec,
    facts,
    is_client,
    is_llm,
    parse_backend_spec,
    provider_class,
)
from ..backends.factory import client_settings
from ..clients.keys import check_same_source
from ..clients.pricing import load_prices
from ..config import TrainConfig, option_name, plugin_sections
from ..envs.spec import EnvSpec
from ..errors import UserError
from ..formats import FORMATS, refinable_format_names, table_format_names
from ..formats.base import RefineOptions
from ..modes import MODES, proposes_nothing
from ..modes.base import Mode, memory_needs, method_of, needs_backend
from ..modes.selection import check_select
from ..storage.sizes import check_memory, table_need
from ..storage.templates import check_prompts_dir
from .environment import probe_outputs, resolve_spec
from .names import short_spec

__all__ = ["Prepared", "prepare", "unused_options", "unused_settings"]


@dataclass
class Prepared:
    """A configuration a run can start from: the resolved settings, the environment's spec, the mode, and the notes
    to say before the run starts."""

    cfg: TrainConfig
    spec: EnvSpec
    mode: Mode
    backend: str | None
    """The backend's registry name (``openai`` of ``openai:gpt-4o``); None for a mode that proposes nothing, which
    the run builds no backend for (:attr:`~llm_policy_gen.modes.base.ModeBase.needs_backend`)."""
    notes: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        """What the console and the run directory's default name call the run: the backend as given, or the
        method with its model (``lm-policy(SmolLM2-135M-Instruct.Q4_1)``, ``q-learning``) for a mode without one."""
        if self.backend is None:
            return method_of(self.mode, self.cfg).name
        return short_spec(self.cfg.backend or self.backend)  # a model's or a record's path by its stem


def prepare(cfg: TrainConfig, spec: EnvSpec | None = None) -> Prepared:
    """``cfg`` checked and resolved (see the module doc). ``spec``: the recorded spec of a run being resumed, whose
    configuration is already resolved; without it the spec comes from ``cfg`` and its train defaults apply."""
    notes: list[str] = []
    if spec is None:
        spec = resolve_spec(cfg)
        probe_outputs(spec, cfg.seed)
        if spec.train_defaults:
            cfg = cfg.with_env_defaults(spec.train_defaults)
    mode: Mode = MODES.load(cfg.mode)()
    check_select(mode, cfg)
    if cfg.backend is None and needs_backend(mode):
        spec_given, why = default_backend_spec()
        cfg = cfg.updated({"backend": spec_given}, "default backend")
        notes.append(f"backend: {spec_given} ({why})")
    name = parse_backend_spec(cfg.backend or "offline")[0] if needs_backend(mode) else None
    if cfg.output_format != "auto":
        if cfg.output_format not in FORMATS:
            raise FORMATS.unknown(cfg.output_format, accepted=["auto", *table_format_names()])
        if FORMATS.entry(cfg.output_format).info.get("table") is False:
            raise UserError(f"bad --output-format {cfg.output_format!r}: it answers one action, not a table; accepted: "
                            f"auto, {', '.join(table_format_names())}")
    _check_refine(cfg, name, mode)
    n_states, n_actions = spec.observation_discretizer().n_states, spec.action_discretizer().n_actions
    check_memory([table_need(n_states, n_actions), *memory_needs(mode, cfg, n_states, n_actions)])
    if name is None:  # a mode that proposes nothing: no backend, no client, no key to check
        return Prepared(cfg, spec, mode, None, notes + unused_options(cfg, None))
    notice = facts(name).notice
    if notice:
        notes.append(f"backend: {name} -- {notice}")
    if client_settings(cfg, name).temperature is not None and is_client(name) and not is_llm(name):
        notes.append(f"note: --temperature has no effect on {name} (no language model is sampled)")
    notes += unused_options(cfg, name)
    load_prices(client_settings(cfg, name).prices_file)  # a missing or broken price file: refused before any start
    check_prompts_dir()  # LLM_POLICY_GEN_PROMPTS naming no folder of templates: refused before anything starts
    provider = provider_class(name)
    if provider is not None:  # a base-URL variable that is no http(s) URL: refused here, before any start
        provider.configured_url(client_settings(cfg, name).base_url)
    if provider is not None and provider.key_variables:  # the key and its URL from one place, refused here if not
        given_url = client_settings(cfg, name).base_url
        check_same_source(provider.key_found_in(), provider.base_url_variable, bool((given_url or "").strip()))
    return Prepared(cfg, spec, mode, name, notes)


def _check_refine(cfg: TrainConfig, name: str | None, mode: Mode) -> None:
    """``--rules-refine`` tunes the numbers of rules a model wrote: it needs rules answers from an LLM (or replay)."""
    refine = cfg.options_for(RefineOptions).rules_refine
    if not refine:
        return
    if name is None or not is_client(name):
        raise UserError(f"--rules-refine {refine} needs an LLM backend (or replay:PATH) to write the rules it refines, "
                        f"not {name or cfg.backend or mode.name!r}; give --backend PROVIDER[:MODEL] or drop "
                        "--rules-refine")
    if mode.needs_session:
        raise UserError(f"--rules-refine {refine} does not apply to --mode {mode.name}, which asks the model for each "
                        "action; use it with --mode table")
    refinable = refinable_format_names()
    if cfg.output_format not in refinable:
        raise UserError(f"--rules-refine {refine} needs --output-format {' or '.join(refinable)} (it tunes the numbers "
                        f"of rules), not {cfg.output_format!r}")


def unused_options(cfg: TrainConfig, backend: str | None) -> list[str]:
    """A note for each plug-in option the user gave (on the command line or in a file) that no plug-in of this run
    takes (``--reward-potential-bound`` with ``--mode table``): it is recorded in config.json but changes nothing. A
    note, not a refusal: a shared config file or a sweep's settings may hold options for the other runs' plug-ins."""
    return [f"note: {option_name(key)} has no effect on this run's {why}"
            for key, why in unused_settings(cfg, set(cfg.explicit), backend).items()]


def unused_settings(cfg: TrainConfig, keys: set[str], backend: str | None = None) -> dict[str, str]:
    """Of the settings ``keys``, the plug-in options that no plug-in of this run takes, each with why (``"mode table
    (it is an option of mode reward)"``); ``backend``: the backend's registry name (default: ``cfg``'s; none for a
    mode that proposes nothing)."""
    if backend is None and proposes_nothing(cfg.mode) is None:
        backend = parse_backend_spec(cfg.backend or "offline")[0]
    in_use = {("mode", cfg.mode), ("answer format", cfg.output_format), *((("backend", backend),) if backend else ()),
              *(("logger", n.strip().lower()) for n in cfg.log)}
    out: dict[str, str] = {}
    for section in plugin_sections():
        if in_use & set(section.plugins):
            continue
        kinds = {kind for kind, _ in section.plugins}
        used = "; ".join(f"{kind} {', '.join(n for k, n in sorted(in_use) if k == kind) or '(none)'}"
                         for kind in sorted(kinds))
        for key in section.options:
            if key in keys:
                out[key] = f"{used} (it is an option of {section.title})"
    return out
