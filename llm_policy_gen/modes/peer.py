"""``--mode peer``: a Stable-Baselines3 (or sb3-contrib) learner with the RL Baselines3 Zoo's tuning, as a run.

The peer is the baseline a language-model method is compared with (STYLE 28): SB3's PPO, DQN, SAC or TD3, or
sb3-contrib's TRPO (``--peer-algo``), with the hyperparameters of the installed ``rl-zoo3`` package's YAML for the
task (:mod:`llm_policy_gen.peers.zoo`, ``config.json`` names the source); a task without an entry runs at SB3's
defaults, labelled untuned. It acts on the environment's own observations (not the table's states), in ``n_envs`` of
the run's learner environments: every reset takes the run's next training seed and every finished episode is counted
by the run (``episodes_total``, ``env_steps_total``), as any mode's.

**Actions** (``--peer-actions``). ``native`` (the default): on a task with a ``Box`` action space the learner acts in
it, as under the zoo (SB3 clips PPO's and TRPO's Gaussian actions to the box, rescales SAC's and TD3's squashed ones;
the zoo's gSDE and ``log_std_init`` apply), a discrete task's actions are its action indices. ``spec``: the spec's
action indices (a continuous task's discretized levels), as peer runs acted before the option existed; a run whose
``config.json`` has no ``peer_actions`` resumes so. SAC and TD3 need a ``Box``, DQN action indices: any other
combination, and a zoo entry using gSDE on action indices, is refused in one line.

**Budget and iterations.** The budget is ``--max-steps`` learner steps, else the zoo's ``n_timesteps`` (an untuned
task needs ``--max-steps``); schedules (``lin_X``) run over it. An iteration is the budget over ``--iterations``,
rounded up to whole rollouts (``n_steps`` x ``n_envs``) for PPO and TRPO, to whole collections (``train_freq`` x
``n_envs``) for DQN, SAC and TD3; after it the network is measured on the run's held-out seeds (the curve's point,
deterministic actions) and written as the run's policy (``peer_policy.safetensors`` and ``peer_policy.json``), which
``evaluate`` runs. The run reports its final network. It ends once the learner has taken the budget's steps.

**Selection** (``--peer-select eval``, off by default): SB3's ``EvalCallback`` as the run's own service: after every
iteration the network plays ``--peer-eval-episodes`` deterministic episodes on the run's next training seeds,
counted as selection episodes (the learner does not learn from them); the network with the best mean so far (the
first of equal ones) is measured on the held-out seeds and reported beside the final one (``summary.json``'s
``selected_heldout_mean``, ``selected_iteration``). The final network stays the run's policy file.

**Resume.** The learner's state (:mod:`llm_policy_gen.peers.sb3_learner`) is in ``checkpoint.npz`` with the run's, as
arrays: a killed PPO or TRPO run resumes to the uninterrupted one's result. The replay buffer of DQN, SAC and TD3 is
not saved, so such a run is refused on ``--resume`` (one line).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from ..errors import UserError
from ..registry import PluginOptions, setting
from .base import Setup, Step

if TYPE_CHECKING:
    from ..config import TrainConfig
    from ..peers.sb3_learner import PeerLearner
    from ..peers.zoo import Hyper
    from .base import RunServices

__all__ = ["PeerMode", "PeerOptions"]

ON_POLICY = ("ppo", "trpo")
DEFAULT_N_STEPS = 2048
"""SB3's ``n_steps`` for PPO and TRPO where the zoo names none."""
DEFAULT_TRAIN_FREQ = {"dqn": 4, "sac": 1, "td3": 1}
"""SB3's ``train_freq`` for the off-policy algorithms where the zoo names none."""
BOX_ONLY = ("sac", "td3")
"""The algorithms that act only on a ``Box`` (native actions)."""
PEER_ACTIONS_BEFORE = "spec"
"""What a peer run's ``config.json`` without ``peer_actions`` (written before the option) acted with."""


def _train_every(freq: Any) -> int:
    """DQN's steps per environment between updates (a ``(n, "step")`` pair or a number; by episodes: 1)."""
    if isinstance(freq, (tuple, list)):
        return int(freq[0]) if len(freq) == 2 and freq[1] == "step" else 1
    return int(freq)


class PeerOptions(PluginOptions):
    """The peer mode's options."""

    peer_algo: Literal["ppo", "trpo", "dqn", "sac", "td3"] = setting(
        "ppo", "ppo, trpo, dqn, sac or td3", "peer mode: the library learner (SB3 PPO, DQN, SAC or TD3, sb3-contrib "
        "TRPO) with the RL Baselines3 Zoo's settings for the task (SB3's defaults, labelled untuned, where the zoo has "
        "none); SAC and TD3 need continuous actions, DQN discrete ones.")
    peer_actions: Literal["native", "spec"] = setting(
        "native", "native or spec", "peer mode: the actions the learner takes: native, the environment's own (a "
        "continuous task's Box, as under the zoo); spec, the spec's action indices (a continuous task's discretized "
        "levels, as peer runs acted before this option).")
    peer_select: Literal["none", "eval"] = setting(
        "none", "none or eval", "peer mode: report the final network only (none), or also the network that scored "
        "best on --peer-eval-episodes counted evaluation episodes on training seeds after each iteration (eval).")
    peer_eval_episodes: int = setting(5, "an integer >= 1", "peer mode, --peer-select eval: evaluation episodes per "
                                      "iteration (counted as selection episodes).", ge=1)


def _chunk(algo: str, hyper: Hyper, budget: int, iterations: int) -> int:
    """Learner steps per iteration: the budget over the iterations, in whole rollouts (on-policy) or whole
    collections of every environment (DQN)."""
    unit = hyper.n_envs * (int(hyper.kwargs.get("n_steps", DEFAULT_N_STEPS)) if algo in ON_POLICY
                           else _train_every(hyper.kwargs.get("train_freq", DEFAULT_TRAIN_FREQ[algo])))
    return unit * max(1, math.ceil(budget / max(1, iterations) / unit))


def _recorded(record: dict[str, Any] | None) -> dict[str, Any]:
    """The peer's facts as a resumed run's config.json records them ({} for a new run)."""
    facts = record.get("peer") if isinstance(record, dict) else None
    return facts if isinstance(facts, dict) else {}


def _peer_actions(given: str, record: dict[str, Any] | None) -> str:
    """The actions a run acts with: ``given``, or for a resumed run whose ``config.json`` predates the option the
    actions it was started with (:data:`PEER_ACTIONS_BEFORE`)."""
    settings = record.get("config") if isinstance(record, dict) else None
    if isinstance(settings, dict) and "peer_actions" not in settings:
        return PEER_ACTIONS_BEFORE
    return given


def _check_actions(algo: str, actions: str, box: bool, hyper: Hyper, env_id: str) -> None:
    """The algorithm, the actions and the task fit together; else one line saying what would."""
    if algo in BOX_ONLY and not box:
        raise UserError(f"--peer-algo {algo} needs continuous actions, and {env_id}'s are discrete; accepted here: "
                        "ppo, trpo, dqn")
    if algo in BOX_ONLY and actions == "spec":
        raise UserError(f"--peer-algo {algo} needs continuous actions, and --peer-actions spec gives it the spec's "
                        "action indices; use --peer-actions native")
    if algo == "dqn" and box and actions == "native":
        raise UserError(f"--peer-algo dqn needs discrete actions, and {env_id}'s are continuous (--peer-actions "
                        "native); give --peer-actions spec (the spec's action indices) or --peer-algo ppo, trpo, sac "
                        "or td3")
    if hyper.kwargs.get("use_sde") and (actions == "spec" or not box):
        raise UserError(f"the zoo's {algo} entry for {env_id} uses gSDE, which needs continuous actions, and "
                        "--peer-actions spec gives the spec's action indices; use --peer-actions native")


class PeerMode:
    """A zoo-tuned library learner on the raw observations; its network is the run's policy."""

    name = "peer"
    needs_backend = False
    needs_session = False
    proposes = False
    judges_candidates = False
    candidates_per_iteration = 1
    backend_spelling = "offline"
    heldout_each_iteration = True
    """The network is measured on the held-out seeds after every iteration (not once at the end, as direct's)."""
    selects = ("none",)
    """No keeper: ``--select none`` only; its own selection is ``--peer-select eval``."""
    Options = PeerOptions

    def __init__(self) -> None:
        self.options = PeerOptions()
        self.hyper: Hyper | None = None
        self.learner: PeerLearner | None = None
        self.facts: dict[str, Any] = {}
        self.chosen: dict[str, Any] = {}
        """``--peer-select eval``: the best evaluation mean so far, its iteration and its held-out figures."""
        self.native = False
        """The learner acts in the environment's own ``Box`` (``--peer-actions native`` on a continuous task)."""

    def selection(self, cfg: TrainConfig) -> str:
        """``eval`` with ``--peer-select eval``, else ``none`` (:func:`~.selection.select_of`)."""
        return cfg.options_for(PeerOptions).peer_select

    def counting(self, cfg: TrainConfig) -> str:
        o = cfg.options_for(PeerOptions)
        if o.peer_select == "eval":
            return (f"its learner's training episodes, and {o.peer_eval_episodes} evaluation episodes per iteration on "
                    "training seeds, which choose the selected network and which it does not learn from")
        return "every counted episode is a training episode of its learner; no selection"

    # ------------------------------------------------------------------ Mode
    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        """The zoo's settings for the task, the budget and the iteration's steps; every problem is one line."""
        from ..discretize import BoxActions
        from ..envs.catalog import gym_id
        from ..peers import require_peers
        from ..peers.sb3_learner import RESUMES
        from ..peers.zoo import ALGO_FILES, hyperparameters

        o = self.options = setup.cfg.options_for(PeerOptions)
        require_peers("--mode peer")
        algo = o.peer_algo
        if resumed and algo not in RESUMES:
            raise UserError(f"a --peer-algo {algo} run cannot resume: its replay buffer is not in the checkpoint "
                            f"(only {', '.join(RESUMES)} runs resume); start a new run")
        if algo not in ALGO_FILES:
            raise UserError(f"bad --peer-algo {algo}; accepted: {', '.join(ALGO_FILES)}")
        env_id = gym_id(setup.spec.env_id)
        box = isinstance(setup.actions, BoxActions)
        actions = _peer_actions(o.peer_actions, setup.record if resumed else None)
        hyper = self.hyper = hyperparameters(algo, env_id)
        _check_actions(algo, actions, box, hyper, env_id)
        self.native = box and actions == "native"
        if hyper.frame_stack:
            raise UserError(f"the zoo's {algo} entry for {env_id} stacks frames, which --mode peer does not build")
        was = _recorded(setup.record)
        budget = setup.cfg.max_steps or hyper.n_timesteps
        if budget is None:
            raise UserError(f"--mode peer on {env_id} with {algo}: the zoo has no entry (untuned), so no budget; give "
                            "--max-steps N")
        horizon = int(was.get("horizon", budget))
        chunk = int(was.get("iteration_steps", _chunk(algo, hyper, budget, setup.cfg.iterations)))
        self.facts = {"algo": algo, "hyperparameters_source": hyper.source, "tuned": hyper.tuned,
                      "zoo_entry": _plain(hyper.raw), "n_envs": hyper.n_envs, "horizon": horizon,
                      "iteration_steps": chunk, "library": _library(algo), "observations": "raw",
                      "peer_actions": actions, "actions": ("the environment's own (Box)" if self.native else
                                                           "the spec's action indices"),
                      "policy_reported": "final (no selection)" if o.peer_select == "none"
                      else "final, and the best of the evaluations on training seeds"}
        return {"peer": self.facts}

    def build_learner(self, run: RunServices) -> PeerLearner:
        """The learner over the run's learner environment and ``n_envs - 1`` siblings of it."""
        from ..peers.sb3_learner import PeerLearner

        assert self.hyper is not None
        first: Any = run.learner_env
        if self.native:
            first.use_native_actions()  # before its siblings, which take it from it
        envs = [first, *(first.sibling() for _ in range(self.hyper.n_envs - 1))]
        self.learner = PeerLearner(envs, self.hyper, self.facts["algo"], run.cfg.seed, self.facts["horizon"],
                                   self.facts["iteration_steps"])
        return self.learner

    def start(self, run: RunServices) -> None:
        """The untrained network measured and written (iteration 0)."""
        self._measure(run, 0)

    def iterate(self, run: RunServices, iteration: int) -> Step:
        learner = self.learner
        assert learner is not None
        learner.update()
        episodes = sorted((e for env in learner.envs for e in env.take()), key=lambda e: e.uid)
        policy = self._measure(run, iteration)
        budget = run.cfg.max_steps or int(self.facts["horizon"])
        stop = f"budget reached: {learner.steps} learner steps >= {budget}" if learner.steps >= budget else None
        fields = {"peer_steps": learner.steps, "peer_updates": learner.updates, "peer_episodes": len(episodes),
                  "candidates": 0}
        if self.options.peer_select == "eval":
            fields.update(self._evaluate(run, policy, iteration))
        return Step(episodes, None, [], None, False, stop=stop, fields=fields)

    def _evaluate(self, run: RunServices, policy: Any, iteration: int) -> dict[str, Any]:
        """The evaluation callback: the network on the next training seeds (counted), kept when best so far."""
        returns = [e.ret for e in run.select_episodes(policy, iteration, self.options.peer_eval_episodes)]
        mean = float(sum(returns) / len(returns))
        if not self.chosen or mean > float(self.chosen["eval_mean"]):
            held = run.heldout_of(policy)
            self.chosen = {"eval_mean": mean, "iteration": iteration, "heldout_mean": held.mean,
                           "heldout_std": float(held.returns.std())}
        return {"peer_eval_returns": returns, "peer_eval_mean": mean, "peer_selected_iteration":
                self.chosen["iteration"]}

    def _measure(self, run: RunServices, iteration: int) -> Any:
        """The network on the held-out seeds, measured with the policy rebuilt from the arrays that are written."""
        from ..peers.network_policy import NetworkPolicy

        assert self.learner is not None
        facts, arrays = self.learner.policy_arrays()
        policy = NetworkPolicy(facts, arrays)
        run.measure_heldout(policy, iteration)
        run.save_network_policy({**facts, "iteration": iteration, "learner_steps": self.learner.steps},
                                policy.to_bytes())
        return policy

    def finish(self, run: RunServices) -> dict[str, Any]:
        out: dict[str, Any] = {"peer_algo": self.facts.get("algo"),
                               "hyperparameters_source": self.facts.get("hyperparameters_source")}
        if self.learner is not None:
            out.update(peer_steps=self.learner.steps, peer_updates=self.learner.updates)
        if self.chosen:
            out.update(selected_heldout_mean=self.chosen["heldout_mean"], selected_iteration=self.chosen["iteration"],
                       selected_eval_mean=self.chosen["eval_mean"])
        return out

    def state_dict(self) -> dict[str, Any]:
        """The selection so far (``--peer-select eval``); the learner's state is the run's to save
        (:class:`~.base.OwnLoop`)."""
        return {"chosen": dict(self.chosen)} if self.chosen else {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.chosen = dict(state.get("chosen") or {})


def _plain(x: Any) -> Any:
    """A zoo entry as JSON values (numbers, strings, lists, dicts)."""
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x if isinstance(x, (int, float, str, bool, type(None))) else str(x)


def _library(algo: str) -> str:
    import importlib.metadata as md

    lib = "sb3-contrib" if algo == "trpo" else "stable-baselines3"
    return f"{lib} {md.version(lib)}, rl-zoo3 {md.version('rl-zoo3')}"
