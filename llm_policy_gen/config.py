"""One configuration object for a training run, filled from defaults, a TOML file and the command line.

The whole resolved object is saved into the run's ``config.json`` (it never holds a key).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import UserError

__all__ = ["TrainConfig", "load_toml", "read_toml"]


@dataclass
class TrainConfig:
    """Settings of one ``train`` run. Defaults reproduce the seed project where it had one."""

    env_id: str = "CartPole-v1"
    """Gymnasium id; shipped specs: CartPole-v1, FrozenLake-v1 (see `llm-policy-gen envs`)."""
    backend: str | None = None
    """Backend spec (offline, replay:PATH, gemini[:MODEL], openai[:MODEL], anthropic[:MODEL], ollama[:MODEL]);
    None: the first configured provider, else offline."""
    iterations: int = 30
    """Proposal rounds."""
    seed: int = 0
    """Seeds every environment reset, the exploration and the offline optimiser."""
    logs_dir: str = "logs"
    """Run directories go to LOGS_DIR/<env-id>/<run-id>/."""
    run_id: str | None = None
    """Name of the run directory (default: time stamp, backend and seed)."""
    train_episodes: int = 4
    """Training episodes per iteration, run with the best table plus exploration."""
    explore_epsilon: float = 0.1
    """Probability of a random action in training episodes."""
    eval_start: int = 3
    """Test episodes per candidate at iteration 1."""
    eval_max: int = 10
    """Test episodes per candidate at the end of the rise."""
    eval_rise_every: int = 1
    """Add one test episode every this many iterations (the best is re-scored on the added seeds)."""
    heldout_episodes: int = 100
    """Held-out episodes measured whenever the best changes; reported only, never used to decide."""
    patience: int = 0
    """Stop after this many iterations without a new best (0: never)."""
    best_k: int = 4
    """Best episodes shown in the prompt."""
    worst_k: int = 1
    """Worst episodes shown in the prompt."""
    memory_capacity: int = 200
    """Episodes kept in the experience memory."""
    gamma: float = 0.98
    """Discount of the per-state return-to-go evidence."""
    max_prompt_chars: int = 12000
    """Upper bound on the user prompt's size; evidence rows are cut to fit."""
    output_format: str = "auto"
    """table, edits, or auto (table up to 1,000 states, edits above)."""
    repair_attempts: int = 2
    """Follow-up calls with the validation errors when an answer is refused."""
    base_url: str | None = None
    """Provider base URL (else the SDK's own variable)."""
    timeout_s: float = 120.0
    """Per-request timeout."""
    max_retries: int = 4
    """Retries of timeouts, 429 and 5xx (exponential backoff with jitter, honouring Retry-After)."""
    temperature: float | None = None
    """Sampling temperature (None: the provider's default)."""
    max_output_tokens: int = 16384
    """Upper bound on an answer's tokens."""
    budget_usd: float | None = None
    """Stop cleanly before a call would pass this spend."""
    cache: bool = True
    """Cache LLM answers on disk (keyed by provider, model, messages, schema and sampling)."""
    cache_dir: str | None = None
    """Answer cache folder (default: ~/.cache/llm-policy-gen/responses)."""
    prices_file: str | None = None
    """TOML price table (default: the shipped llm_policy_gen/data/prices.toml)."""
    mode: str = "table"
    """table (the model writes the table) or direct (the model picks each action)."""
    bins: list[int] | None = None
    """Override the bins of the spec's observation dimensions."""
    dims: list[int] | None = None
    """Observation indices to tabulate (generic environments)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra gymnasium.make keyword arguments."""
    binning: str | None = None
    """uniform (default) or seed (the seed project's round((n-1)*ratio) bins)."""
    plots: bool = True
    """Write training.png and testing.png at the end."""
    progress: bool = True
    """Show a progress bar on stderr."""
    explicit: list[str] = field(default_factory=list)
    """Settings given by the user (TOML or command line); an env spec's train defaults never replace them."""

    def validate(self) -> TrainConfig:
        def bad(name: str, value: Any, accepted: str) -> UserError:
            return UserError(f"bad {name} {value!r}: accepted {accepted}")

        if self.iterations < 1:
            raise bad("--iterations", self.iterations, "an integer >= 1")
        if self.train_episodes < 0:
            raise bad("train_episodes", self.train_episodes, "an integer >= 0")
        if not 0.0 <= self.explore_epsilon <= 1.0:
            raise bad("explore_epsilon", self.explore_epsilon, "a number in [0, 1]")
        if not 1 <= self.eval_start <= self.eval_max:
            raise bad("eval_start/eval_max", (self.eval_start, self.eval_max), "1 <= eval_start <= eval_max")
        if self.eval_rise_every < 1:
            raise bad("eval_rise_every", self.eval_rise_every, "an integer >= 1")
        if self.heldout_episodes < 1:
            raise bad("heldout_episodes", self.heldout_episodes, "an integer >= 1")
        if not 0.0 < self.gamma < 1.0:
            raise bad("gamma", self.gamma, "a number in (0, 1)")
        if self.output_format not in ("auto", "table", "edits"):
            raise bad("--output-format", self.output_format, "auto, table or edits")
        if self.mode not in ("table", "direct"):
            raise bad("--mode", self.mode, "table or direct")
        if self.repair_attempts < 0:
            raise bad("repair_attempts", self.repair_attempts, "an integer >= 0")
        if self.budget_usd is not None and self.budget_usd < 0:
            raise bad("--budget-usd", self.budget_usd, "a number >= 0")
        if self.max_prompt_chars < 1000:
            raise bad("max_prompt_chars", self.max_prompt_chars, "an integer >= 1000")
        if self.seed < 0:
            raise bad("--seed", self.seed, "an integer >= 0")
        return self

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def updated(self, values: dict[str, Any], source: str) -> TrainConfig:
        """A copy with ``values`` applied; unknown names are a user error naming ``source``."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise UserError(f"{source}: unknown setting(s) {', '.join(unknown)}; accepted: {', '.join(sorted(names))}")
        explicit = sorted(set(self.explicit) | set(values))
        try:
            return dataclasses.replace(self, **values, explicit=explicit)
        except TypeError as exc:
            raise UserError(f"{source}: {exc}") from None

    def with_env_defaults(self, defaults: dict[str, Any]) -> TrainConfig:
        """Apply an env spec's ``train_defaults`` to the settings the user did not give."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(defaults) - names)
        if unknown:
            raise UserError(f"env spec train_defaults: unknown setting(s) {', '.join(unknown)}")
        chosen = {k: v for k, v in defaults.items() if k not in self.explicit}
        return dataclasses.replace(self, **chosen) if chosen else self


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """A TOML file as a dict; an unreadable or invalid file is a :class:`UserError` naming ``what`` it is."""
    p = Path(path)
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"cannot read {what} {p}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"{what} {p} is not valid TOML: {exc}") from None


def load_toml(path: str | Path) -> dict[str, Any]:
    """Settings from a TOML file: top-level keys, or a ``[train]`` table (dashes allowed in names)."""
    p = Path(path)
    data = read_toml(p, "config file")
    section = data.get("train", data)
    if not isinstance(section, dict):
        raise UserError(f"config file {p}: [train] must be a table")
    keep = ("env_kwargs", "env-kwargs")
    return {k.replace("-", "_"): v for k, v in section.items() if not isinstance(v, dict) or k in keep}
