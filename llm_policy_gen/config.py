"""One configuration object for a training run: a pydantic model filled from defaults, a file and the command line.

Sources, later ones winning: the defaults below, a config file (``--config``: a TOML file with top-level keys or one
``[train]`` table, or an earlier run's ``config.json``, which re-runs that run's experiment), then the command line.
Every value is checked once, here: an unknown key or section, a value of the wrong type (``iterations = "three"``,
``2.5`` or ``true``) or out of range is a :class:`~llm_policy_gen.errors.UserError` whose one line names the key,
the value and what is accepted (exit code 2). The whole resolved object is saved into the run's ``config.json``
(it never holds a key).

:class:`TrainConfig`'s fields are the settings every run shares (the run, the keeper, the prompt, the environment's
table). A plug-in's own settings are declared on the plug-in (a :class:`~llm_policy_gen.registry.PluginOptions`
model named ``Options`` on its class: the reward mode's ``reward_potential_bound``, the clients' ``base_url``,
...); they sit flat beside the shared ones in a TOML file, on the command line and in ``config.json`` (so files
written before they moved still load), are checked by the model that declares them, and a plug-in reads them typed with
:meth:`TrainConfig.options_for`. :func:`options` lists them all.
"""

from __future__ import annotations

import json
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from .errors import UserError
from .registry import Option, PluginOptions, Registry, Section, declared_options, setting
from .registry import plugin_sections as _sections
from .schema.aliases import MOVED_BACKENDS, note_old_spelling, settings_in, spelled_mode

__all__ = ["TrainConfig", "SEED_MAX", "config_error", "option_name", "Option", "options", "train_options",
           "option_names", "resume_options", "operational_settings", "setting", "PLUGIN_REGISTRIES", "plugin_sections",
           "plugin_options"]

SEED_MAX = 2**32 - 1
"""Seeds are 32-bit (numpy's and gymnasium's seeding accept larger ones, but results would not be portable)."""

#: The registries whose plug-ins may declare options, as ``"module:attribute"``, in the order ``--help`` shows them.
#: Named here, on the configuration's floor, by string: the two imports of the package that run up a floor
#: (``tests/data/floors.toml``: the modes and the backends read their settings as a :class:`TrainConfig`).
PLUGIN_REGISTRIES = ("llm_policy_gen.modes:MODES", "llm_policy_gen.backends:BACKENDS",
                     "llm_policy_gen.formats:FORMATS", "llm_policy_gen.loggers.writers:LOGGERS")


def plugin_sections() -> list[Section]:
    """Every registered plug-in's options, one section per declaring class (:func:`llm_policy_gen.registry.
    plugin_sections` over :data:`PLUGIN_REGISTRIES`, imported on first use)."""
    import importlib

    registries: list[Registry[Any]] = []
    for path in PLUGIN_REGISTRIES:
        module, _, attr = path.partition(":")
        registries.append(getattr(importlib.import_module(module), attr))
    return _sections(registries)


def plugin_options() -> dict[str, Option]:
    """Every plug-in option by its key (see :func:`plugin_sections`)."""
    return {k: o for s in plugin_sections() for k, o in s.options.items()}


_field = setting  # the shared settings below are declared as every plug-in's options are

OptionsT = TypeVar("OptionsT", bound=PluginOptions)


class TrainConfig(BaseModel):
    """Settings of one ``train`` run. Defaults reproduce the seed project where it had one."""

    model_config = ConfigDict(extra="allow", strict=True, validate_assignment=True, frozen=False,
                              allow_inf_nan=False)
    """``allow_inf_nan=False``: every number setting is finite (``--budget-usd inf``, ``1e400`` or ``nan`` would pass
    the range checks of some fields and then break config.json, a budget or a timeout). ``extra``: the plug-ins'
    options, flat beside the fields below, each checked by the options model that declares it (:meth:`_plugins`);
    any other key is refused."""

    env_id: str = _field("CartPole-v1", "a gymnasium id (see `llm-policy-gen envs`), or module:EnvId",
                         "Gymnasium id; `module:EnvId` imports `module` first (a user's own registered env).",
                         flag="--env")
    backend: str | None = _field(None, "{names}", "Backend spec; None: the first configured provider, else offline.",
                                 names="llm_policy_gen.backends:backend_specs")
    mode: str = _field("table", "{names}", names="llm_policy_gen.modes:MODES", description=(
                       "What the model writes: the table (table), each action (direct), ...; q-learning: no model, "
                       "the standard Q-learner (old spelling: --backend q-learning); lm-policy: a language model "
                       "as the policy network's backbone (--lm-model)."))
    iterations: int = _field(30, "an integer >= 0", "Proposal rounds (0: the run measures the table it starts from, "
                             "or a learner's read-out before any update, and stops).", ge=0, resume=True)
    max_episodes: int | None = _field(None, "an integer >= 1", "End the run at the first iteration boundary at or "
                                      "past this many counted episodes (training, test and confirmation); combines "
                                      "with iterations.", ge=1, resume=True)
    max_steps: int | None = _field(None, "an integer >= 1", "End the run at the first iteration boundary at or past "
                                   "this many counted environment steps (of the training, test and confirmation "
                                   "episodes; held-out ones not counted); summary.json says by how many steps it "
                                   "went past. Combines with iterations and max_episodes.", ge=1, resume=True)
    candidates: int = _field(4, "an integer in 1..64", "Candidates asked for per iteration (K samples of one "
                             "prompt, scored on the same test seeds).", ge=1, le=64)
    seed: int = _field(0, f"an integer in 0..{SEED_MAX}", "Seeds every environment reset, the exploration and the "
                       "non-LLM proposers.", ge=0, le=SEED_MAX)
    logs_dir: str = _field("logs", "a folder", "Run directories go to LOGS_DIR/<env-id>/<run-id>/.", operational=True)
    run_id: str | None = _field(None, "a non-empty name without path separators or control characters, not made "
                                "only of dots", "Name of the run directory (default: time stamp, backend and seed).",
                                operational=True)
    train_episodes: int = _field(4, "an integer >= 1", "Training episodes per iteration, run with the best table "
                                 "plus exploration.", ge=1)
    explore_epsilon: float = _field(0.1, "a number in [0, 1]", "Probability of a random action in training "
                                    "episodes.", ge=0.0, le=1.0)
    test_start: int = _field(3, "an integer >= 1", "Test episodes per candidate at iteration 1.", ge=1)
    test_max: int = _field(10, "an integer >= test_start", "Test episodes per candidate at the end of the rise.",
                           ge=1)
    test_seeds: Literal["fixed", "fresh"] = _field("fixed", "fixed or fresh", "Test seeds of the candidates: the "
                                                   "same first ones every iteration (fixed), or new ones every "
                                                   "iteration, the kept table scored on them too (fresh).")
    test_rise_every: int = _field(1, "an integer >= 1", "Add one test episode every this many iterations (the "
                                  "best is re-scored on the added seeds).", ge=1)
    confirm_episodes: int = _field(10, "an integer >= 0", "Fresh episodes per batch of the paired confirmation a "
                                   "challenger that won on the test seeds must pass before adoption (0: no "
                                   "confirmation).", ge=0)
    confirm_batches: int = _field(4, "an integer >= 1", "Batches of fresh episodes the confirmation may run while "
                                  "undecided.", ge=1)
    confirm_z: float = _field(2.0, "a number >= 0", "Adopt only if the paired mean difference on the fresh "
                              "episodes passes a one-sided t-test at the level of this normal z.", ge=0.0)
    select: Literal["keeper", "none"] | None = _field(
        None, "keeper or none", "What chooses a learner's reported policy. keeper: the keeper's test and confirmation "
        "episodes (counted) choose the kept table; none: no keeper episode is played and the run reports its final "
        "policy, measured on the held-out seeds 20 times over the run (never counted). None: the mode's default "
        "(keeper where the keeper judges tables; none for --mode peer, whose selection is --peer-select).")
    heldout_episodes: int = _field(100, "an integer >= 1", "Held-out episodes measured whenever the best changes; "
                                   "reported only, never used to decide.", ge=1)
    patience: int = _field(0, "an integer >= 0", "Stop after this many iterations without a new best (0: never).",
                           ge=0, resume=True)
    best_k: int = _field(4, "an integer >= 0", "Best episodes shown in the prompt.", ge=0)
    worst_k: int = _field(1, "an integer >= 0", "Worst episodes shown in the prompt.", ge=0)
    evidence: Literal["extremes", "summary", "both"] = _field(
        "extremes", "extremes, summary or both", "Episodes the prompt shows: the best and worst ones (extremes); "
        "statistics of the recent episodes per observation dimension (returns, lengths, how they ended) and the "
        "median episode (summary); or both.")
    memory_capacity: int = _field(200, "an integer >= 1", "Episodes kept in the experience memory.", ge=1)
    evidence_gamma: float = _field(0.98, "a number in (0, 1)", "Discount of the per-state return-to-go evidence.",
                                   gt=0.0, lt=1.0)
    max_prompt_chars: int = _field(12000, "an integer >= 1000", "Upper bound on the user prompt's size; evidence "
                                   "rows are cut to fit.", ge=1000)
    max_prompt_tokens: int | None = _field(None, "an integer >= 200", "Upper bound on the prompt's size in tokens, "
                                           "for a backend that knows its tokenizer (llamacpp); evidence rows are cut "
                                           "as for max_prompt_chars. None: the smaller of max_prompt_chars in "
                                           "tokens and the context less room for the answer.", ge=200)
    output_format: str = _field("auto", "auto, {names}", "Answer format; auto: table up to 1,000 states, edits "
                                "above.", names="llm_policy_gen.formats:table_format_names")
    bins: list[int] | None = _field(None, "a list of integers >= 1", "Override the bins of the spec's observation "
                                    "dimensions.")
    dims: list[int] | None = _field(None, "a list of observation indices", "Observation indices to tabulate "
                                    "(generic environments).")
    env_kwargs: dict[str, Any] = _field({}, "a table of gymnasium.make keyword arguments",
                                        "Extra gymnasium.make keyword arguments.")
    binning: Literal["uniform", "seed"] | None = _field(None, "uniform or seed", "uniform (default) or seed (the "
                                                        "seed project's round((n-1)*ratio) bins).")
    prior: Literal["spec", "neutral", "start"] = _field(
        "spec", "spec, neutral or start", "What the spec's prior rule does. spec: it is offline's first candidate "
        "(the centre of its search), adopted only if it beats the kept table, which starts at the spec's default "
        "action; neutral: no rule (the ablation that shows what the prior does); start: the kept table starts at the "
        "prior rule's table (its floor: what every proposal must beat; the current table of a model's first prompt), "
        "and offline's search starts there too. Without a prior rule in the spec, all three start at the default "
        "action.")
    plots: bool = _field(True, "true or false", "Write training.png and testing.png at the end.", flag="--no-plots",
                         resume=True, operational=True)
    progress: bool = _field(True, "true or false", "Show a progress bar (or, without a terminal, one line per "
                            "iteration) on stderr.", flag="--no-progress", resume=True, operational=True)
    quiet: bool = _field(False, "true or false", "Print nothing but the final summary line.", resume=True,
                         operational=True)
    log: list[str] = _field([], "a list of: {names}", "Extra loggers of per-iteration scalars.", operational=True,
                            names="llm_policy_gen.loggers.writers:LOGGERS")
    explicit: list[str] = _field([], "a list of setting names", "Settings given by the user (file or command "
                                 "line); an env spec's train defaults never replace them.", flag=None, operational=True)

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from .storage.runlog import run_id_problem

        if run_id_problem(v):
            raise ValueError("bad run id")
        return v

    @field_validator("env_id")
    @classmethod
    def _env_id(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("empty")
        return v

    @model_validator(mode="before")
    @classmethod
    def _plugins(cls, data: Any) -> Any:
        """The plug-ins' options among ``data`` checked by the models that declare them, and those not given filled
        with their defaults (config.json records every one, as it records every shared setting)."""
        if not isinstance(data, dict):
            return data
        sections = plugin_sections()
        given = {k: v for k, v in data.items() if k not in cls.model_fields}
        known = {k for s in sections for k in s.options}
        unknown = sorted(set(given) - known)
        if unknown:
            raise ValueError(f"unknown setting {unknown[0]!r}")
        out = {k: v for k, v in data.items() if k in cls.model_fields}
        for section in sections:
            checked = section.model.model_validate({k: given[k] for k in section.options if k in given})
            out.update({k: getattr(checked, k) for k in section.options})
        return out

    @model_validator(mode="before")
    @classmethod
    def _mode_spelling(cls, data: Any) -> Any:
        """The backend of a mode that proposes nothing, in one place: ``backend = "q-learning"`` (the old spelling of
        ``mode = "q-learning"``, :data:`~llm_policy_gen.schema.aliases.MOVED_BACKENDS`) becomes that mode, with one
        deprecation note; such a mode records the backend its class spells
        (:attr:`~llm_policy_gen.modes.base.ModeBase.backend_spelling`, as runs recorded it before) and refuses any
        other. What is filled in joins ``explicit``."""
        return _spelled(data) if isinstance(data, dict) else data

    def options_for(self, model: type[OptionsT]) -> OptionsT:
        """The options ``model`` declares, typed, from this configuration (a plug-in's view of its settings)."""
        extra = self.__pydantic_extra__ or {}
        return model.model_validate({k: extra[k] for k in model.model_fields if k in extra})

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.test_max < self.test_start:
            raise ValueError(f"bad test_max {self.test_max} with test_start {self.test_start}: accepted test_max >= "
                             "test_start")
        return self

    # ------------------------------------------------------------------ building
    @classmethod
    def checked(cls, values: dict[str, Any], source: str) -> TrainConfig:
        """``values`` as a configuration; an unknown key or a bad value is one :class:`UserError` naming ``source``."""
        unknown = sorted(set(values) - set(options()) - {"explicit"})
        if unknown:
            raise UserError(f"{source}: unknown setting {unknown[0]!r}; accepted: "
                            f"{', '.join(k for k in options() if k != 'explicit')}")
        for section in plugin_sections():  # a plug-in's option first, so that the message names its key
            try:
                section.model.model_validate({k: values[k] for k in section.options if k in values})
            except ValidationError as exc:
                raise config_error(exc, source, values) from None
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            raise config_error(exc, source, values) from None

    @classmethod
    def build(cls, *sources: tuple[dict[str, Any], str]) -> TrainConfig:
        """Defaults, then each ``(values, source name)`` in turn; keys given anywhere become ``explicit``."""
        merged: dict[str, Any] = {}
        explicit: set[str] = set()
        for given, source in sources:
            values = settings_in(given, source)
            cls.checked({**merged, **values}, source)
            _check_names(values, source)
            merged.update(values)
            explicit |= set(values) - {"explicit"}
            explicit |= set(values.get("explicit", []))
        merged["explicit"] = sorted(explicit)
        return cls.checked(merged, "settings")

    def updated(self, values: dict[str, Any], source: str) -> TrainConfig:
        """A copy with ``values`` applied (they, and only they, join the explicit settings)."""
        values = settings_in(values, source)
        data = {**self.model_dump(), **values, "explicit": sorted(set(self.explicit) | (set(values) - {"explicit"}))}
        return TrainConfig.checked(data, source)

    def with_env_defaults(self, defaults: dict[str, Any]) -> TrainConfig:
        """Apply an env spec's ``train_defaults`` to the settings the user did not give."""
        defaults = settings_in(defaults, "env spec train_defaults")
        chosen = {k: v for k, v in defaults.items() if k not in self.explicit}
        if not chosen and set(defaults) <= set(options()):
            return self
        return TrainConfig.checked({**self.model_dump(), **chosen}, "env spec train_defaults")

    def to_dict(self) -> dict[str, Any]:
        """The settings as config.json records them, flat (the plug-ins' options beside the shared ones):
        ``base_url`` without its ``user:password@`` (never written)."""
        from .clients.keys import without_userinfo

        data = self.model_dump()
        if data.get("base_url"):
            data["base_url"] = without_userinfo(data["base_url"])
        return data


def _spelled(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the mode its old backend spelling names, and the backend its backend-less mode records
    (:meth:`TrainConfig._mode_spelling`); a spelling under another mode is a :class:`UserError`."""
    backend, mode = data.get("backend"), data.get("mode", TrainConfig.model_fields["mode"].default)
    explicit = set(data.get("explicit") or [])
    moved = spelled_mode(backend)
    if moved is not None and mode != moved:
        if mode != TrainConfig.model_fields["mode"].default:
            before = MOVED_BACKENDS[str(backend).strip().lower()][1]
            raise UserError(f"--backend {backend} is the old spelling of --mode {moved} and does not answer --mode "
                            f"{mode}; for a Q-learner over the kept table's episodes under another mode, use "
                            f"--backend {before}")
        note_old_spelling(f"note: --backend {backend} is the old spelling of --mode {moved} (deprecated; it still "
                          "works)")
        data, mode = {**data, "mode": moved, "explicit": sorted(explicit | {"mode"})}, moved
    import importlib

    modes = importlib.import_module("llm_policy_gen.modes")  # up a floor, as PLUGIN_REGISTRIES names it
    declared = modes.proposes_nothing(mode) if isinstance(mode, str) else None
    if declared is None:  # a mode that needs a backend (an unknown one: the registry's refusal where it is used)
        return data
    own = declared.backend_spelling
    if backend is not None and backend != own and spelled_mode(backend) != mode:
        raise UserError(f"--mode {mode} proposes nothing and asks no backend; drop --backend {backend}")
    if backend != own and own is not None:
        data = {**data, "backend": own, "explicit": sorted(set(data.get("explicit") or []) | {"backend"})}
    return data


#: Settings whose values are names in a registry: setting -> (module, registry).
_NAMED = {"log": ("llm_policy_gen.loggers.writers", "LOGGERS"), "mode": ("llm_policy_gen.modes", "MODES")}


def _check_names(values: dict[str, Any], source: str) -> None:
    """A name a file gives (``log = ["cvs"]``) is refused naming the file and its key; a name on the command line
    is left to the registry, whose message names the option."""
    if source == "command line":
        return
    import importlib

    for key, (module, attr) in _NAMED.items():
        given = values.get(key)
        registry = getattr(importlib.import_module(module), attr)
        for name in given if isinstance(given, list) else [] if given is None else [given]:
            n = str(name).strip().lower() if key == "log" else str(name)
            if n and n not in registry:
                raise registry.unknown(n, where=f"in {source} (key {key})")


def config_error(exc: ValidationError, source: str, values: dict[str, Any]) -> UserError:
    """One line for the first problem of a validation error (of the shared settings or of a plug-in's options): the
    key, the value and what is accepted."""
    err = exc.errors()[0]
    key = str(err["loc"][0]) if err["loc"] else ""
    if not key:  # a model-level check (test_max < test_start)
        return UserError(f"{source}: {err['msg'].removeprefix('Value error, ')}")
    option = options().get(key)
    accepted = option.accepted if option is not None else None
    if err["type"] == "finite_number":
        accepted = f"a finite number: {accepted or 'see --help'}"
    value = values.get(key, err.get("input"))
    shown = json.dumps(value) if isinstance(value, (str, bool, int, float, type(None))) else repr(value)
    if source == "command line":
        return UserError(f"bad {option_name(key)} {shown[:80]}: accepted {accepted or err['msg']}")
    return UserError(f"{source}: bad {key} = {shown[:80]}: accepted {accepted or err['msg']}")


def options() -> dict[str, Option]:
    """Every setting with its flag, help, default and role: the shared ones (:class:`TrainConfig`'s fields) first,
    then each registered plug-in's (its ``Option.section`` names the plug-ins that declare it)."""
    shared = declared_options(TrainConfig)
    found = plugin_options()
    clash = sorted(set(shared) & set(found))
    if clash:
        raise ValueError(f"plug-in option {clash[0]!r} ({found[clash[0]].section}) is a shared setting already")
    return {**shared, **found}


def train_options() -> tuple[str, ...]:
    """Settings that are ``train`` options (the others are given in a file only)."""
    return tuple(name for name, o in options().items() if o.flag)


def option_names() -> dict[str, str]:
    """Settings whose command-line option is not ``--`` + the name with dashes."""
    return {name: o.flag for name, o in options().items() if o.flag and o.flag != "--" + name.replace("_", "-")}


def resume_options() -> tuple[str, ...]:
    """Settings ``train --resume`` may change (everything else comes from the run's config.json)."""
    return tuple(name for name, o in options().items() if o.resume)


def operational_settings() -> tuple[str, ...]:
    """Settings that change how a run goes, not what it finds: they may differ between invocations of one sweep."""
    return tuple(name for name, o in options().items() if o.operational)


def option_name(key: str) -> str:
    """The command-line option of the setting ``key`` (``env_id`` -> ``--env``, ``max_episodes`` ->
    ``--max-episodes``), for messages a user reads."""
    return option_names().get(key, "--" + key.replace("_", "-"))
