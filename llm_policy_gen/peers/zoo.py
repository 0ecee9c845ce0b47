"""The RL Baselines3 Zoo's tuned hyperparameters, read from the installed ``rl-zoo3`` package at run time.

``hyperparameters(algo, env_id)`` finds the zoo's entry for the environment in ``rl_zoo3/hyperparams/ALGO.yml``
(the very file the zoo's ``train.py`` reads; no value is copied here) and turns it into what Stable-Baselines3 takes,
as the zoo's ``ExperimentManager`` does:

- ``lin_X`` strings (learning rate, clip range) become linear schedules from X to 0 over the run;
- ``policy_kwargs`` and a string ``normalize`` are Python expressions in the YAML (``"dict(net_arch=[256, 256],
  activation_fn=nn.ReLU)"``): they are parsed with :func:`parse_kwargs`, which accepts literals, ``dict(...)`` and a
  short list of torch names (activations, optimisers) and refuses anything else; the text is never evaluated;
- ``normalize`` becomes a ``VecNormalize`` (with the algorithm's gamma, as the zoo does), ``n_envs`` the number of
  training environments, ``frame_stack`` a ``VecFrameStack``; ``n_timesteps`` is the zoo's own budget;
- ``noise_type`` and ``noise_std`` (TD3) become the zoo's ``NormalActionNoise`` or ``OrnsteinUhlenbeckActionNoise``,
  built by the learner over the action space's dimensions (:attr:`Hyper.noise`);
- a key the zoo turns into code this module does not rebuild (``env_wrapper``, ``callback``, ``replay_buffer_class``,
  ...) is refused with :class:`ZooError` naming the key and its value, never dropped.

MuJoCo entries in the zoo are ``-v4`` (some ``-v2``): a MuJoCo ``-v5`` task takes the newest earlier version's entry
and says so. An environment with no entry for the algorithm gets Stable-Baselines3's defaults, labelled untuned,
never another environment's entry (nor the zoo's catch-all ``default``).

Read by ``train --mode peer`` (:mod:`llm_policy_gen.modes.peer`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from importlib import metadata, util
from pathlib import Path
from typing import Any

from ..errors import UserError

__all__ = ["ALGO_FILES", "UNSUPPORTED", "SCHEDULED", "ZooError", "Hyper", "parse_kwargs", "zoo_version",
           "package_dir", "read_file", "find_entry", "hyperparameters", "benchmark_reference", "find_benchmark_row"]

ALGO_FILES = {"ppo": "ppo.yml", "dqn": "dqn.yml", "sac": "sac.yml", "td3": "td3.yml", "trpo": "trpo.yml"}
UNSUPPORTED = ("env_wrapper", "vec_env_wrapper", "callback", "replay_buffer_class", "replay_buffer_kwargs",
               "monitor_kwargs", "env_kwargs", "noise_std_final")
"""Zoo keys that name code to build; refused rather than ignored (no entry of the goal table's tasks has one: the
zoo wraps none of their environments)."""
NOISE_TYPES = ("normal", "ornstein-uhlenbeck")
"""The zoo's ``noise_type`` values (TD3's action noise), matched as its exp_manager matches them."""
SCHEDULED = ("learning_rate", "clip_range", "clip_range_vf")


class ZooError(UserError, ValueError):
    """An entry (or a policy_kwargs text) this module will not turn into settings."""


def _torch_names() -> dict[str, Any]:
    from torch import nn, optim

    acts = {n: getattr(nn, n) for n in ("ReLU", "Tanh", "ELU", "LeakyReLU", "SiLU", "GELU", "Sigmoid", "Identity")}
    opts = {n: getattr(optim, n) for n in ("Adam", "AdamW", "RMSprop", "SGD")}
    names: dict[str, Any] = {}
    for prefix in ("nn.", "th.nn.", "torch.nn."):
        names.update({prefix + k: v for k, v in acts.items()})
    for prefix in ("optim.", "th.optim.", "torch.optim."):
        names.update({prefix + k: v for k, v in opts.items()})
    return names


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _value(node: ast.expr, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _value(node.operand, names)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_value(e, names) for e in node.elts]
        return items if isinstance(node, ast.List) else tuple(items)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_value(k, names): _value(v, names) for k, v in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    if isinstance(node, ast.Call) and _dotted(node.func) == "dict" and not node.args:
        if any(k.arg is None for k in node.keywords):
            raise ZooError("dict(**...) is not accepted")
        return {str(k.arg): _value(k.value, names) for k in node.keywords}
    dotted = _dotted(node)
    if dotted is not None and dotted in names:
        return names[dotted]
    raise ZooError(f"{ast.unparse(node)[:60]!r} is not accepted (literals, dict(...) and "
                   f"torch activations or optimisers only)")


def parse_kwargs(text: str) -> dict[str, Any]:
    """A zoo ``policy_kwargs`` (or ``normalize``) text as a dict, e.g. ``"dict(log_std_init=-2, ortho_init=False,
    activation_fn=nn.ReLU, net_arch=dict(pi=[256, 256], vf=[256, 256]))"``. Only literals, ``dict(...)``/``{...}``
    and the torch names of :func:`_torch_names` are accepted: a call, an attribute or a name outside that list
    raises :class:`ZooError` (the text is parsed, never evaluated)."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ZooError(f"not an expression: {text[:60]!r}") from exc
    out = _value(tree.body, _torch_names())
    if not isinstance(out, dict):
        raise ZooError(f"not a dict: {text[:60]!r}")
    return out


@dataclass
class Hyper:
    """What one run is built from: the algorithm's keyword arguments and the zoo's environment settings."""

    source: str
    """Where the values come from, e.g. ``"rl-zoo3 2.9.2 dqn.yml CartPole-v1"`` or ``"untuned: SB3 defaults"``."""
    tuned: bool
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for the algorithm's constructor (schedules built, policy_kwargs parsed)."""
    policy: str = "MlpPolicy"
    n_envs: int = 1
    normalize: dict[str, Any] | None = None
    """``VecNormalize`` keyword arguments, or None: no normalisation."""
    frame_stack: int | None = None
    n_timesteps: int | None = None
    """The zoo's own training budget in environment steps (None: untuned)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """The entry as read from the YAML (after merges), for the record."""
    noise: tuple[str, float] | None = None
    """The zoo's action noise (``noise_type``, ``noise_std``), or None: none."""


def zoo_version() -> str:
    return metadata.version("rl-zoo3")


def package_dir() -> Path:
    """The installed ``rl_zoo3`` folder, found without importing it: importing ``rl_zoo3`` replaces gymnasium's
    ``TimeLimit`` for the whole process (its ``gym_patches``), which would change the environments of everything
    else run in the process."""
    spec = util.find_spec("rl_zoo3")
    if spec is None or not spec.submodule_search_locations:
        raise ZooError("rl-zoo3 is not installed (the `peers` extra)")
    return Path(list(spec.submodule_search_locations)[0])


def read_file(algo: str) -> dict[str, Any]:
    """The zoo's YAML for ``algo`` from the installed package."""
    import yaml

    if algo not in ALGO_FILES:
        raise ZooError(f"no zoo file for {algo!r}; known: {', '.join(ALGO_FILES)}")
    text = (package_dir() / "hyperparams" / ALGO_FILES[algo]).read_text()
    data = yaml.safe_load(text)
    return dict(data) if isinstance(data, dict) else {}


def _is_mujoco(env_id: str) -> bool:
    import gymnasium as gym

    try:
        entry = gym.spec(env_id).entry_point
    except Exception:
        return False
    return isinstance(entry, str) and "mujoco" in entry


def find_entry(entries: dict[str, Any], env_id: str) -> tuple[str, dict[str, Any]] | None:
    """The key and entry for ``env_id``: its own, or for a MuJoCo ``-vN`` the newest earlier version's."""
    if env_id in entries and env_id not in ("default", "atari"):
        return env_id, dict(entries[env_id])
    m = re.fullmatch(r"(.+)-v(\d+)", env_id)
    if m is None or not _is_mujoco(env_id):
        return None
    for v in range(int(m.group(2)) - 1, -1, -1):
        key = f"{m.group(1)}-v{v}"
        if key in entries:
            return key, dict(entries[key])
    return None


def _schedule(key: str, value: Any) -> Any:
    from stable_baselines3.common.utils import LinearSchedule

    if isinstance(value, str):
        kind, _, start = value.partition("_")
        if kind != "lin":
            raise ZooError(f"{key}: unknown schedule {value!r} (only lin_X)")
        return LinearSchedule(float(start), 0.0, 1.0)  # progress * X, as the zoo's SimpleLinearSchedule
    return value


def hyperparameters(algo: str, env_id: str) -> Hyper:
    """The zoo's settings for ``algo`` on ``env_id``, or SB3's defaults labelled untuned."""
    found = find_entry(read_file(algo), env_id)
    if found is None:
        return Hyper(source=f"untuned: SB3 defaults (rl-zoo3 {zoo_version()} {ALGO_FILES[algo]} has no "
                            f"{env_id})", tuned=False)
    key, entry = found
    raw = dict(entry)
    bad = [k for k in entry if k in UNSUPPORTED]
    if bad:
        shown = "; ".join(f"{k}: {str(entry[k])[:80]}" for k in bad)
        raise ZooError(f"{ALGO_FILES[algo]} {key}: {shown} not supported (the zoo builds it as code, which --mode "
                       "peer does not)")
    hyper = Hyper(source=f"rl-zoo3 {zoo_version()} {ALGO_FILES[algo]} {key}"
                         + ("" if key == env_id else f" (used for {env_id})"), tuned=True, raw=raw)
    hyper.n_timesteps = int(float(entry.pop("n_timesteps", 0))) or None
    hyper.policy = str(entry.pop("policy", "MlpPolicy"))
    hyper.n_envs = int(entry.pop("n_envs", 1))
    hyper.frame_stack = entry.pop("frame_stack", None)
    noise = entry.pop("noise_type", None)
    std = entry.pop("noise_std", None)
    if noise is not None:
        if not any(n in str(noise) for n in NOISE_TYPES) or not isinstance(std, (int, float)):
            raise ZooError(f"{ALGO_FILES[algo]} {key}: noise_type {noise!r} with noise_std {std!r}; accepted: "
                           f"{', '.join(NOISE_TYPES)} with a number")
        hyper.noise = (str(noise).strip(), float(std))
    normalize = entry.pop("normalize", False)
    if isinstance(normalize, str):
        normalize = parse_kwargs(normalize)
    if normalize:
        hyper.normalize = dict(normalize) if isinstance(normalize, dict) else {}
        if "gamma" in entry:
            hyper.normalize["gamma"] = entry["gamma"]
    if isinstance(entry.get("policy_kwargs"), str):
        entry["policy_kwargs"] = parse_kwargs(entry["policy_kwargs"])
    if isinstance(entry.get("train_freq"), list):
        entry["train_freq"] = tuple(entry["train_freq"])
    for k in SCHEDULED:
        if k in entry:
            entry[k] = _schedule(k, entry[k])
    hyper.kwargs = entry
    return hyper


def benchmark_reference(algo: str, env_id: str) -> str | None:
    """The zoo's published figure for ``algo`` on ``env_id``, if the installed package ships a benchmark table
    (``benchmark.md`` or ``benchmark.csv`` inside ``rl_zoo3``); None otherwise. Never made up."""
    root = package_dir()
    for name in ("benchmark.md", "benchmark.csv"):
        f = root / name
        if f.is_file():
            return find_benchmark_row(f.read_text(), algo, env_id)
    return None


def find_benchmark_row(text: str, algo: str, env_id: str) -> str | None:
    """The zoo's benchmark table format (``|algo|env_id|mean_reward|std_reward|n_timesteps|...``, markdown or
    CSV): the row's figure as text, or None."""
    for line in text.splitlines():
        cells = [c.strip() for c in re.split(r"[|,]", line.strip().strip("|"))]
        if len(cells) >= 5 and cells[0] == algo and cells[1] == env_id:
            return f"{cells[2]} +/- {cells[3]} after {cells[4]} steps (rl-zoo3 benchmark, not run here)"
    return None
