"""One configuration object for a training run: a pydantic model filled from defaults, a file and the command line.

Sources, later ones winning: the defaults below, a config file (``--config``: a TOML file with top-level keys or one
``[train]`` table, or an earlier run's ``config.json``, which re-runs that run's experiment), then the command line.
Every value is checked once, here: an unknown key or section, a value of the wrong type (``iterations = "three"``,
``2.5`` or ``true``) or out of range is a :class:`~llm_policy_gen.errors.UserError` whose one line names the key,
the value and what is accepted (exit code 2). The whole resolved object is saved into the run's ``config.json``
(it never holds a key).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError, field_validator, model_validator

from .errors import UserError

__all__ = ["TrainConfig", "SEED_MAX", "config_error", "option_name", "Option",
           "OPTIONS", "TRAIN_OPTIONS", "OPTION_NAMES", "RESUME_OPTIONS", "OPERATIONAL_SETTINGS"]

SEED_MAX = 2**32 - 1
"""Seeds are 32-bit (numpy's and gymnasium's seeding accept larger ones, but results would not be portable)."""

def _field(default: Any, accepted: str, description: str, *, flag: str | None = "", resume: bool = False,
           operational: bool = False, **kw: Any) -> Any:
    """A setting: its default, the words that say which values are accepted, its documentation, and how the
    command line and the run treat it (see :class:`Option`).

    ``flag`` is its ``train`` option when that is not ``--`` + the name with dashes (``--env``, ``--no-cache``), or
    None for a setting given only in a file; ``resume``: ``train --resume`` may change it; ``operational``: it changes
    how a run goes, not what it finds, so it may differ between invocations of one sweep.
    """
    extra: dict[str, JsonValue] = {"accepted": accepted, "flag": flag, "resume": resume, "operational": operational}
    return Field(default, description=description, json_schema_extra=extra, **kw)


class TrainConfig(BaseModel):
    """Settings of one ``train`` run. Defaults reproduce the seed project where it had one."""

    model_config = ConfigDict(extra="forbid", strict=True, validate_assignment=True, frozen=False,
                              allow_inf_nan=False)
    """``allow_inf_nan=False``: every number setting is finite (``--budget-usd inf``, ``1e400`` or ``nan`` would pass
    the range checks of some fields and then break config.json, a budget or a timeout)."""

    env_id: str = _field("CartPole-v1", "a gymnasium id (see `llm-policy-gen envs`), or module:EnvId",
                         "Gymnasium id; `module:EnvId` imports `module` first (a user's own registered env).",
                         flag="--env")
    backend: str | None = _field(None, "offline, replay:PATH, gemini[:MODEL], openai[:MODEL], anthropic[:MODEL], "
                                 "ollama[:MODEL], llamacpp:PATH.gguf, q-learning, kept-table-q, random",
                                 "Backend spec; None: the first configured provider, else offline.")
    mode: str = _field("table", "table, direct, reward, advisor, q-learning, lm-policy, or another registered mode",
                       "What the model writes: the table (table), each action (direct), ...; q-learning: no model, "
                       "the standard Q-learner (the mode of --backend q-learning); lm-policy: a language model "
                       "as the policy network's backbone (--lm-model).")
    iterations: int = _field(30, "an integer >= 1", "Proposal rounds.", ge=1, resume=True)
    max_episodes: int | None = _field(None, "an integer >= 1", "End the run once the counted episodes (training, "
                                      "test and confirmation) reach this many; combines with iterations.", ge=1,
                                      resume=True)
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
                                    "episodes.", ge=0.0, le=1.0, flag=None)
    learner_alpha: float = _field(0.2, "a number in (0, 1]", "Reward and advisor modes: step size of the learner's "
                                  "Q-learning.", gt=0.0, le=1.0)
    learner_gamma: float = _field(0.99, "a number in [0, 1)", "Reward and advisor modes: discount of the learner's "
                                  "Q-learning and of the shaping term.", ge=0.0, lt=1.0)
    potential_bound: float = _field(100.0, "a number > 0", "Reward mode: a shaping potential must lie in [-B, B].",
                                    gt=0.0)
    advice_prob: float = _field(0.5, "a number in [0, 1]", "Advisor mode: probability that a training step takes "
                                "the advised action at iteration 1.", ge=0.0, le=1.0)
    advice_decay: float = _field(0.9, "a number in [0, 1]", "Advisor mode: the advice probability is multiplied by "
                                 "this every iteration (p_t = advice_prob * advice_decay^(t-1)).", ge=0.0, le=1.0)
    eval_start: int = _field(3, "an integer >= 1", "Test episodes per candidate at iteration 1.", ge=1, flag=None)
    eval_max: int = _field(10, "an integer >= eval_start", "Test episodes per candidate at the end of the rise.",
                           ge=1, flag=None)
    test_seeds: Literal["fixed", "fresh"] = _field("fixed", "fixed or fresh", "Test seeds of the candidates: the "
                                                   "same first ones every iteration (fixed), or new ones every "
                                                   "iteration, the kept table scored on them too (fresh).")
    eval_rise_every: int = _field(1, "an integer >= 1", "Add one test episode every this many iterations (the "
                                  "best is re-scored on the added seeds).", ge=1, flag=None)
    confirm_episodes: int = _field(10, "an integer >= 0", "Fresh episodes per batch of the paired confirmation a "
                                   "challenger that won on the test seeds must pass before adoption (0: no "
                                   "confirmation).", ge=0)
    confirm_batches: int = _field(4, "an integer >= 1", "Batches of fresh episodes the confirmation may run while "
                                  "undecided.", ge=1)
    confirm_z: float = _field(2.0, "a number >= 0", "Adopt only if the paired mean difference on the fresh "
                              "episodes passes a one-sided t-test at the level of this normal z.", ge=0.0)
    heldout_episodes: int = _field(100, "an integer >= 1", "Held-out episodes measured whenever the best changes; "
                                   "reported only, never used to decide.", ge=1)
    patience: int = _field(0, "an integer >= 0", "Stop after this many iterations without a new best (0: never).",
                           ge=0, resume=True)
    best_k: int = _field(4, "an integer >= 0", "Best episodes shown in the prompt.", ge=0, flag=None)
    worst_k: int = _field(1, "an integer >= 0", "Worst episodes shown in the prompt.", ge=0, flag=None)
    evidence: Literal["extremes", "summary", "both"] = _field(
        "extremes", "extremes, summary or both", "Episodes the prompt shows: the best and worst ones (extremes); "
        "statistics of the recent episodes per observation dimension (returns, lengths, how they ended) and the "
        "median episode (summary); or both.")
    memory_capacity: int = _field(200, "an integer >= 1", "Episodes kept in the experience memory.", ge=1, flag=None)
    gamma: float = _field(0.98, "a number in (0, 1)", "Discount of the per-state return-to-go evidence.", gt=0.0,
                          lt=1.0, flag=None)
    max_prompt_chars: int = _field(12000, "an integer >= 1000", "Upper bound on the user prompt's size; evidence "
                                   "rows are cut to fit.", ge=1000, flag=None)
    max_prompt_tokens: int | None = _field(None, "an integer >= 200", "Upper bound on the prompt's size in tokens, "
                                           "for a backend that knows its tokenizer (llamacpp); evidence rows are cut "
                                           "as for max_prompt_chars. None: the smaller of max_prompt_chars in "
                                           "tokens and the context less room for the answer.", ge=200)
    output_format: str = _field("auto", "auto, table, edits, rules, or another registered format",
                                "Answer format; auto: table up to 1,000 states, edits above.")
    refine: int = _field(0, "an integer >= 0", "Rules answers from an LLM: after each model call, this many "
                         "iterations in which the population search tunes the numbers of the kept rules without "
                         "calling the model (0: every iteration asks the model).", ge=0)
    repair_attempts: int = _field(2, "an integer >= 0", "Follow-up calls with the validation errors when an "
                                  "answer is refused.", ge=0)
    base_url: str | None = _field(None, "a URL", "Provider base URL (else the SDK's own variable).")
    timeout_s: float | None = _field(None, "a number of seconds > 0", "Bound on one whole request attempt, however "
                                     "the answer trickles in (None: 120 s, or 600 s for a local server: Ollama, "
                                     "llamacpp, or an OpenAI-compatible --base-url on a loopback address).", gt=0.0,
                                     flag="--timeout", resume=True, operational=True)
    max_retries: int = _field(4, "an integer >= 0", "Retries of timeouts, connection errors, 429 and 5xx "
                              "(exponential backoff with jitter, honouring Retry-After).", ge=0, resume=True,
                              operational=True)
    temperature: float | None = _field(None, "a number >= 0 within the provider's range",
                                       "Sampling temperature (None: the provider's default).", ge=0.0)
    max_output_tokens: int = _field(16384, "an integer >= 1", "Upper bound on an answer's tokens.", ge=1)
    max_answer_chars: int = _field(262144, "an integer >= 1000", "Longest answer text accepted, in characters: a "
                                   "longer answer is refused as invalid, stored cut to this length, never cached "
                                   "and never sent back whole in a repair.", ge=1000, flag=None)
    n_ctx: int | None = _field(None, "an integer >= 256", "Context size in tokens of an in-process model "
                               "(llamacpp; None: the model's own).", ge=256)
    llm_threads: int | None = _field(None, "an integer >= 1", "Threads of an in-process model (llamacpp; None: "
                                     "the usable cores divided by the sweep's worker processes).", ge=1, resume=True,
                                     operational=True)
    budget_usd: float | None = _field(None, "a number >= 0", "Stop cleanly before a call would pass this spend "
                                      "(calls in flight count).", ge=0.0, resume=True)
    max_concurrent_calls: int = _field(8, "an integer >= 1", "Calls in flight at once (the K candidates of an "
                                       "iteration are asked concurrently).", ge=1, resume=True, operational=True)
    local_concurrency: int = _field(1, "an integer >= 1", "Calls a local server (Ollama, an OpenAI-compatible "
                                    "--base-url on a loopback address) is sent at once; llama_cpp.server serves one "
                                    "at a time.", ge=1, resume=True, operational=True)
    unreachable_after: int = _field(3, "an integer >= 1", "Stop the run after this many iterations in a row "
                                    "without one successful call.", ge=1, operational=True)
    cache: bool = _field(True, "true or false", "Cache LLM answers on disk (keyed by provider, model, messages, "
                         "schema, sampling and candidate).", flag="--no-cache", resume=True, operational=True)
    cache_dir: str | None = _field(None, "a folder", "Answer cache folder (default: "
                                   "~/.cache/llm-policy-gen/responses).", flag=None, operational=True)
    prices_file: str | None = _field(None, "a TOML file", "TOML price table (default: the shipped "
                                     "llm_policy_gen/data/prices.toml).", flag="--prices")
    bins: list[int] | None = _field(None, "a list of integers >= 1", "Override the bins of the spec's observation "
                                    "dimensions.")
    dims: list[int] | None = _field(None, "a list of observation indices", "Observation indices to tabulate "
                                    "(generic environments).")
    env_kwargs: dict[str, Any] = _field({}, "a table of gymnasium.make keyword arguments",
                                        "Extra gymnasium.make keyword arguments.")
    binning: Literal["uniform", "seed"] | None = _field(None, "uniform or seed", "uniform (default) or seed (the "
                                                        "seed project's round((n-1)*ratio) bins).", flag=None)
    prior: Literal["spec", "neutral"] = _field("spec", "spec or neutral", "The starting point of the search: the "
                                               "spec's prior rule (spec), or none, every state at the spec's default "
                                               "action (neutral: the ablation that shows what the prior does).")
    plots: bool = _field(True, "true or false", "Write training.png and testing.png at the end.", flag="--no-plots",
                         resume=True, operational=True)
    progress: bool = _field(True, "true or false", "Show a progress bar (or, without a terminal, one line per "
                            "iteration) on stderr.", flag="--no-progress", resume=True, operational=True)
    quiet: bool = _field(False, "true or false", "Print nothing but the final summary line.", resume=True,
                         operational=True)
    log: list[str] = _field([], "a list of: csv, tensorboard, wandb", "Extra loggers of per-iteration scalars.",
                            operational=True)
    # ---- --mode lm-policy (llm_policy_gen/modes/lm_policy.py; a later design round moves these to the mode)
    lm_model: str | None = _field(None, "a .gguf file or a Hugging Face model folder", "lm-policy mode: the language "
                                  "model that encodes each state's text (not --backend, whose llamacpp: means "
                                  "llama.cpp).")
    lm_features: Literal["lm", "onehot", "random"] = _field(
        "lm", "lm, onehot or random", "lm-policy mode: the head's state features: the model's encodings (lm), or "
        "the controls: one-hot states (onehot), random features of the model's width (random).")
    lm_pooling: Literal["mean", "last"] = _field("mean", "mean or last", "lm-policy mode: an encoding is the mean of "
                                                 "the last hidden states over the text's tokens (mean) or the last "
                                                 "token's (last).")
    lm_learner: Literal["ppo", "trpo"] = _field("ppo", "ppo or trpo", "lm-policy mode: SB3 PPO or sb3-contrib TRPO.",
                                                flag="--learner")
    lm_device: str = _field("cpu", "cpu, or cuda where a GPU is present", "lm-policy mode: torch device of the model "
                            "and the head.", flag="--device")
    lm_n_steps: int = _field(256, "an integer >= 2", "lm-policy mode: environment steps per rollout; an iteration is "
                             "one rollout and its optimisation.", ge=2)
    lm_batch_size: int = _field(64, "an integer >= 2", "lm-policy mode: PPO's minibatch (TRPO: its value "
                                "function's).", ge=2)
    lm_epochs: int = _field(10, "an integer >= 1", "lm-policy mode: PPO's passes over each rollout (TRPO: value "
                            "function updates).", ge=1)
    lm_learning_rate: float = _field(3e-4, "a number > 0", "lm-policy mode: Adam's step size (TRPO: the value "
                                     "function's).", gt=0.0)
    lm_gamma: float = _field(0.99, "a number in [0, 1)", "lm-policy mode: the learner's discount.", ge=0.0, lt=1.0)
    lm_ent_coef: float = _field(0.0, "a number >= 0", "lm-policy mode: PPO's entropy bonus.", ge=0.0)
    lm_net_arch: list[int] = _field([64, 64], "a list of integers >= 1", "lm-policy mode: hidden layers of the head's "
                                    "policy and value networks.")
    lm_cache: str | None = _field(None, "a folder", "lm-policy mode: where the model's safetensors copy and the "
                                  "encodings are kept (default: ~/.cache/llm-policy-gen/lm).", operational=True)
    explicit: list[str] = _field([], "a list of setting names", "Settings given by the user (file or command "
                                 "line); an env spec's train defaults never replace them.", flag=None, operational=True)

    @field_validator("run_id")
    @classmethod
    def _run_id(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from .runlog import run_id_problem

        if run_id_problem(v):
            raise ValueError("bad run id")
        return v

    @field_validator("env_id")
    @classmethod
    def _env_id(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("empty")
        return v

    @field_validator("lm_net_arch")
    @classmethod
    def _net_arch(cls, v: list[int]) -> list[int]:
        if not v or any(n < 1 for n in v):
            raise ValueError("hidden layer sizes must be >= 1")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.eval_max < self.eval_start:
            raise ValueError(f"bad eval_max {self.eval_max} with eval_start {self.eval_start}: accepted eval_max >= "
                             "eval_start")
        return self

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, *sources: tuple[dict[str, Any], str]) -> TrainConfig:
        """Defaults, then each ``(values, source name)`` in turn; keys given anywhere become ``explicit``."""
        merged: dict[str, Any] = {}
        explicit: set[str] = set()
        for values, source in sources:
            unknown = sorted(set(values) - set(cls.model_fields))
            if unknown:
                raise UserError(f"{source}: unknown setting {unknown[0]!r}; accepted: "
                                f"{', '.join(k for k in cls.model_fields if k != 'explicit')}")
            try:
                cls.model_validate({**merged, **values})
            except ValidationError as exc:
                raise config_error(exc, source, {**merged, **values}) from None
            _check_names(values, source)
            merged.update(values)
            explicit |= set(values) - {"explicit"}
            explicit |= set(values.get("explicit", []))
        merged["explicit"] = sorted(explicit)
        try:
            return cls.model_validate(merged)
        except ValidationError as exc:
            raise config_error(exc, "settings", merged) from None

    def updated(self, values: dict[str, Any], source: str) -> TrainConfig:
        """A copy with ``values`` applied (they, and only they, join the explicit settings)."""
        unknown = sorted(set(values) - set(TrainConfig.model_fields))
        if unknown:
            raise UserError(f"{source}: unknown setting {unknown[0]!r}")
        data = {**self.model_dump(), **values, "explicit": sorted(set(self.explicit) | (set(values) - {"explicit"}))}
        try:
            return TrainConfig.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc, source, data) from None

    def with_env_defaults(self, defaults: dict[str, Any]) -> TrainConfig:
        """Apply an env spec's ``train_defaults`` to the settings the user did not give."""
        unknown = sorted(set(defaults) - set(TrainConfig.model_fields))
        if unknown:
            raise UserError(f"env spec train_defaults: unknown setting {unknown[0]!r}")
        chosen = {k: v for k, v in defaults.items() if k not in self.explicit}
        if not chosen:
            return self
        data = {**self.model_dump(), **chosen}
        try:
            return TrainConfig.model_validate(data)
        except ValidationError as exc:
            raise config_error(exc, "env spec train_defaults", data) from None

    def to_dict(self) -> dict[str, Any]:
        """The settings as config.json records them: ``base_url`` without its ``user:password@`` (never written)."""
        from .clients.keys import without_userinfo

        data = self.model_dump()
        if data.get("base_url"):
            data["base_url"] = without_userinfo(data["base_url"])
        return data


#: Settings whose values are names in a registry: setting -> (module, registry).
_NAMED = {"log": ("llm_policy_gen.loggers", "LOGGERS"), "mode": ("llm_policy_gen.modes", "MODES")}


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
    """One line for the first problem of a validation error: the key, the value and what is accepted."""
    err = exc.errors()[0]
    key = str(err["loc"][0]) if err["loc"] else ""
    if not key:  # a model-level check (eval_max < eval_start)
        return UserError(f"{source}: {err['msg'].removeprefix('Value error, ')}")
    extra = TrainConfig.model_fields[key].json_schema_extra if key in TrainConfig.model_fields else None
    accepted = extra.get("accepted") if isinstance(extra, dict) else None
    if err["type"] == "finite_number":
        accepted = f"a finite number: {accepted or 'see --help'}"
    value = values.get(key, err.get("input"))
    shown = json.dumps(value) if isinstance(value, (str, bool, int, float, type(None))) else repr(value)
    if source == "command line":
        option = option_name(key)
        return UserError(f"bad {option} {shown[:80]}: accepted {accepted or err['msg']}")
    return UserError(f"{source}: bad {key} = {shown[:80]}: accepted {accepted or err['msg']}")


@dataclass(frozen=True)
class Option:
    """How one setting of :class:`TrainConfig` is given and treated, as its field declares it."""

    name: str
    flag: str | None
    """Its ``train`` option (``--env``, ``--no-cache``, ``--max-episodes``); None: given only in a file."""
    accepted: str
    description: str
    default: Any
    resume: bool
    """``train --resume`` may change it (everything else comes from the run's config.json)."""
    operational: bool
    """It changes how a run goes, not what it finds: it may differ between invocations of one sweep."""

    def help(self) -> str:
        """The flag's ``--help`` text: the description, what is accepted and the field's own default."""
        if isinstance(self.default, bool):  # a switch: --no-cache turns off what is on by default
            return f"Switch off (on by default): {self.description}" if self.default else \
                f"{self.description} (off by default)"
        if self.default is None and ("None" in self.description or "default" in self.description):
            return f"{self.description} Accepted: {self.accepted}."  # the description says what None does
        if self.default is None or self.default in ([], {}):
            default = "none"
        elif isinstance(self.default, list):
            default = ",".join(str(x) for x in self.default)
        elif isinstance(self.default, dict):
            default = json.dumps(self.default)
        else:
            default = str(self.default)
        return f"{self.description} Accepted: {self.accepted}. Default: {default}."


def _options() -> dict[str, Option]:
    found: dict[str, Option] = {}
    for name, field in TrainConfig.model_fields.items():
        extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
        flag = extra.get("flag", "")  # "": the name with dashes; None: no flag
        flag = "--" + name.replace("_", "-") if flag == "" else flag
        found[name] = Option(name=name, flag=str(flag) if flag else None,
                             accepted=str(extra.get("accepted", "")), description=field.description or "",
                             default=field.get_default(call_default_factory=True),
                             resume=bool(extra.get("resume")), operational=bool(extra.get("operational")))
    return found


#: Every setting with its flag, help, default and role, read once from the fields above.
OPTIONS = _options()
#: Settings that are ``train`` options (the others are given in a file only).
TRAIN_OPTIONS = tuple(name for name, o in OPTIONS.items() if o.flag)
#: Settings whose command-line option is not ``--`` + the name with dashes.
OPTION_NAMES = {name: o.flag for name, o in OPTIONS.items() if o.flag and o.flag != "--" + name.replace("_", "-")}
#: Settings ``train --resume`` may change (everything else comes from the run's config.json).
RESUME_OPTIONS = tuple(name for name, o in OPTIONS.items() if o.resume)
#: Settings that change how a run goes, not what it finds: they may differ between invocations of one sweep.
OPERATIONAL_SETTINGS = tuple(name for name, o in OPTIONS.items() if o.operational)


def option_name(key: str) -> str:
    """The command-line option of the setting ``key`` (``env_id`` -> ``--env``, ``max_episodes`` ->
    ``--max-episodes``), for messages a user reads."""
    return OPTION_NAMES.get(key, "--" + key.replace("_", "-"))
