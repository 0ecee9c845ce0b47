"""``--mode q-learning`` (old spelling: ``--backend q-learning``): the standard epsilon-greedy tabular Q-learner.

Classic Q-learning (Watkins 1989; Sutton and Barto, section 6.5) on the spec's discretisation, with no language
model: the learner explores with its **own** epsilon-greedy policy in its **own** episodes and updates after every
environment step,

``Q(s, a) += alpha * (r + gamma * max_a' Q(s', a') - Q(s, a))``

with the target ``r`` where the episode terminates (a step cut by the time limit bootstraps from its next state).
It runs its own loop (:class:`~llm_policy_gen.modes.base.OwnLoop`, as ``lm-policy`` does): its episodes are played in
the run's learner environment (:attr:`~llm_policy_gen.modes.base.RunServices.learner_env`), so they are counted
like every other episode and step of the run (``episodes_total``, ``env_steps_total``, ``--max-episodes``).

Each iteration the learner plays the run's ``--train-episodes`` training episodes (the spec's train default where the
user gives none: CliffWalking-v1 4, Taxi-v4 20) on the run's next training seeds, then its **greedy read-out table**
(``argmax_a Q``, ties to the lowest action) is judged by the keeper like any candidate: test episodes and the paired
confirmation, counted, and the held-out seeds measure the kept table. The learner goes on from its own Q whatever the
verdict, and learns from every episode the run plays and counts (``q_learns_from = "all"``, the default since issue
62): the keeper's test and confirmation episodes of the greedy tables, once the verdict is in, and the initial
table's scoring episodes at the start, one sweep over each (:meth:`~.qtable.QLearner.learn`; its exploration
schedule counts its own episodes only). ``q_learns_from = "own"`` is the behaviour before: it learns from its own
episodes only, and a run's ``config.json`` without the key means it (:data:`~llm_policy_gen.run.schema.
BEHAVIOUR_BEFORE`). ``--select none`` plays no keeper episode at all: the run reports the last greedy table and every
counted episode is one the learner learned from, step by step. One table is judged per iteration (``--candidates``
does not apply).

Hyperparameters (:class:`QLearningOptions`, the mode's options: ``--q-alpha`` ... flags, flat keys in a TOML file and
``config.json``, which also records them in its ``learner`` fact); their defaults:

* ``q_alpha = 0.5`` -- step size;
* ``q_gamma = 0.99`` -- discount;
* epsilon: ``q_epsilon_start = 0.1`` falling linearly to ``q_epsilon_end = 0.05`` over the learner's first
  ``q_epsilon_episodes = 200`` episodes, then ``0.05``; the greedy action's ties are broken at random in training
  (with ``Q0 = 0`` and step costs, untried actions look best, which explores the grid tasks by itself);
* ``q_init = 0`` for every pair (no optimism beyond what zero is for tasks whose steps cost).

The run's ``explore_epsilon`` and ``learner_*`` settings belong to the table search and the reward and advisor modes;
this mode does not read them.

They were chosen on the tuning seeds 100-109 only, never on the judged seeds 0-9: the old
``bench/qlearning_tune.py --grid`` (now the suite ``qlearning-tune``, which tunes them per task) ran alpha in
{0.1, 0.5, 1}, epsilon_start in {1, 0.1} and epsilon_episodes in {50, 100, 200} on CliffWalking-v1 (500 counted
episodes) and Taxi-v4 (1,000), and took the point with the most tuning seeds at CliffWalking's optimum, then
the best Taxi mean. alpha = 0.1 missed CliffWalking's optimum on most seeds and never left -200 on Taxi; every point
with alpha 0.5 or 1 reached -13 on all 10 seeds; the best Taxi means were alpha 1 with epsilon 1 -> 0.05 over 100
episodes (-104.8) and alpha 0.5 with 0.1 -> 0.05 over 200 (-107.4), within each other's seed spread. alpha = 1 was
set aside: it replaces each value by its last sample, right only where transitions are deterministic, and this
mode serves every task (CartPole's bins are not). gamma and Q0 were not tuned.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import Field

from ..registry import setting
from .base import ModeBase, Setup, Step
from .qtable import LearnerPolicy, QLearner, QOptions

if TYPE_CHECKING:
    import gymnasium as gym

    from ..collect import Episode
    from ..config import TrainConfig
    from ..discretize import ObservationDiscretizer
    from .base import RunServices

__all__ = ["QLearningOptions", "QLearningMode", "OnlineQPolicy", "OwnEpisodes"]


class QLearningOptions(QOptions):
    """The standard learner's hyperparameters (see the module docstring for how they were chosen); the step size and
    the discount are every Q-learning mode's (:class:`~.qtable.QOptions`)."""

    q_alpha: float = Field(default=0.5, gt=0.0, le=1.0)  # this mode's own step size (QOptions declares the setting)
    q_epsilon_start: float = setting(0.1, "a number in [0, 1]", "q-learning mode: exploration at the learner's first "
                                     "episode.", ge=0.0, le=1.0)
    q_epsilon_end: float = setting(0.05, "a number in [0, 1]", "q-learning mode: exploration once the schedule has "
                                   "run out.", ge=0.0, le=1.0)
    q_epsilon_episodes: int = setting(200, "an integer >= 0", "q-learning mode: learner episodes over which epsilon "
                                      "falls linearly from --q-epsilon-start to --q-epsilon-end.", ge=0)
    q_init: float = setting(0.0, "a number", "q-learning mode: every Q(s, a) at the start.")
    q_learns_from: Literal["all", "own"] = setting(
        "all", "all or own", "q-learning mode: the episodes the learner learns from: every counted one, the keeper's "
        "test and confirmation episodes included (all), or only its own epsilon-greedy ones (own: the behaviour "
        "before issue 62, which a run's config.json without the key means).")

    def epsilon(self, episodes: int) -> float:
        """Exploration of the learner's episode number ``episodes`` (0-based)."""
        frac = min(1.0, episodes / self.q_epsilon_episodes) if self.q_epsilon_episodes > 0 else 1.0
        return float(self.q_epsilon_start + frac * (self.q_epsilon_end - self.q_epsilon_start))

    def describe(self) -> dict[str, Any]:
        """The settings as config.json's ``learner`` record names them."""
        return {"alpha": self.q_alpha, "gamma": self.q_gamma, "epsilon_start": self.q_epsilon_start,
                "epsilon_end": self.q_epsilon_end, "epsilon_episodes": self.q_epsilon_episodes,
                "q_init": self.q_init}


class OnlineQPolicy(LearnerPolicy):
    """The learner acting epsilon-greedily on its Q and learning after every step (the collector calls
    :meth:`observe`)."""

    def observe(self, states: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_states: np.ndarray,
                terminated: np.ndarray) -> None:
        self.learner.update(states, actions, rewards, next_states, terminated)


class OwnEpisodes:
    """The q-learning mode's own loop (a :class:`~.base.Learner`): each :meth:`update` plays ``--train-episodes``
    whole episodes in the run's learner environment (every reset takes the run's next training seed; every finished
    episode is counted by the run), acting epsilon-greedily on the mode's Q and updating it after every step. Its Q is
    the mode's state (``checkpoint.npz`` keeps it there, as before this loop); it holds none of its own."""

    def __init__(self, mode: QLearningMode, env: gym.Env[Any, Any], observation: ObservationDiscretizer,
                 episodes: int, seed: int) -> None:
        self.mode, self.env, self.observation, self.episodes, self.seed = mode, env, observation, episodes, seed
        self.iteration = 0
        """The iteration under way, set by the mode: its exploration stream is seeded by it."""
        self.used: list[float] = []
        """The epsilon of each episode of the last update."""

    def update(self) -> None:
        learner, options = self.mode._learner(), self.mode.options
        policy = LearnerPolicy(learner, self.observation, np.random.default_rng([self.seed, self.iteration, 17]),
                               options.epsilon(learner.episodes))
        self.used = []
        for _ in range(self.episodes):
            state, _ = self.env.reset()
            done = False
            while not done:
                action = int(policy.act_states(np.asarray([state]))[0])
                nxt, reward, terminated, truncated, _ = self.env.step(action)
                learner.update(np.asarray([state]), np.asarray([action]), np.asarray([float(reward)]),
                               np.asarray([nxt]), np.asarray([bool(terminated)]))
                state, done = nxt, bool(terminated or truncated)
            self.used.append(policy.epsilon)
            learner.episodes += 1
            policy.epsilon = options.epsilon(learner.episodes)

    def table(self) -> np.ndarray:
        return self.mode._learner().greedy()

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


class QLearningMode(ModeBase):
    """The standard epsilon-greedy tabular Q-learner (see the module docstring)."""

    name = "q-learning"
    needs_backend = False
    backend_spelling = "q-learning"
    candidates_per_iteration = 1
    selects = ("keeper", "none")
    Options = QLearningOptions

    def __init__(self) -> None:
        self.learner: QLearner | None = None
        self.keeper_learned = 0
        """The keeper's episodes the learner learned from (``q_learns_from = "all"``)."""
        self.loop: OwnEpisodes | None = None
        self.options = QLearningOptions()
        """This run's options (read from its configuration by :meth:`prepare`)."""

    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        self.options = setup.cfg.options_for(QLearningOptions)
        return {"learner": {"algorithm": "tabular Q-learning, epsilon-greedy in its own episodes, one update per "
                                         "step; its greedy table is judged", **self.options.describe()}}

    def counting(self, cfg: TrainConfig) -> str:
        if cfg.select == "none":
            return "every counted episode is one of the learner's own, which it learns from step by step"
        if cfg.options_for(QLearningOptions).q_learns_from == "own":
            return ("its own episodes, which it learns from, and the keeper's test and confirmation episodes, which "
                    "choose the kept table and which it does not learn from")
        return ("every counted episode is learned from: its own episodes step by step, and the keeper's test and "
                "confirmation episodes, which choose the kept table, once the verdict is in")

    def start(self, run: RunServices) -> None:
        first = run.start_from_initial()
        o = self.options
        self.learner = QLearner(run.observation.n_states, run.actions.n_actions, o.q_alpha, o.q_gamma, o.q_init)
        self._learn_keepers(first)

    def _learn_keepers(self, episodes: list[Episode]) -> None:
        """The keeper's episodes learned from (``q_learns_from = "all"``), outside the exploration schedule."""
        if self.options.q_learns_from == "all" and episodes:
            self._learner().learn(episodes, own=False)
            self.keeper_learned += len(episodes)

    def _learner(self) -> QLearner:
        assert self.learner is not None, "start() or load_state_dict() first"
        return self.learner

    def build_learner(self, run: RunServices) -> OwnEpisodes:
        """The mode's own loop over the run's learner environment (:class:`~.base.OwnLoop`)."""
        self.loop = OwnEpisodes(self, run.learner_env, run.observation, run.cfg.train_episodes, run.cfg.seed)
        return self.loop

    def iterate(self, run: RunServices, iteration: int) -> Step:
        learner = self._learner()
        learns_all = self.options.q_learns_from == "all"
        if not learns_all:  # the kept table's added test seeds first, as before; else the verdict holds them
            run.score_best(iteration)
        assert self.loop is not None, "build_learner() first"
        self.loop.iteration = iteration
        step = run.update_learner(iteration)
        if step.verdict is not None:
            self._learn_keepers(step.verdict.episodes)
        used = self.loop.used
        step.train_epsilon = float(np.mean(used)) if used else None
        if learns_all:
            step.fields.update(learner_keeper_episodes=self.keeper_learned)
        step.fields.update(learner_updates=learner.updates, learner_episodes=learner.episodes,
                           epsilons=[round(e, 6) for e in used], train_seeds=[e.seed for e in step.train_episodes])
        return step

    def finish(self, run: RunServices) -> dict[str, Any]:
        learner = self._learner()
        return {"candidates": 1, "learner_updates": learner.updates, "learner_episodes": learner.episodes,
                "learner_keeper_episodes": self.keeper_learned}

    def state_dict(self) -> dict[str, Any]:
        return {"learner": None if self.learner is None else self.learner.state_dict(),
                "keeper_learned": self.keeper_learned}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.keeper_learned = int(state.get("keeper_learned", 0))  # absent before issue 62: learned from none
        if state["learner"] is not None:
            self.learner = QLearner(1, 1)
            self.learner.load_state_dict(state["learner"])
