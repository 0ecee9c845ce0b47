"""A mode whose learner runs its own loop (``modes.base.OwnLoop``): the run counts its episodes and steps, judges its
read-out table with the keeper, checkpoints its state with the run's, and a resumed run equals an uninterrupted one.

The mode and its learner are written here, in the test, and registered by name like a foreign plug-in: a tabular
Q-learner with its own random generator, which steps the run's learner environment itself a fixed number of steps
per update (so its episodes run across updates)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from run_helpers import cfg, quiet, run_records

from llm_policy_gen.errors import RunInterrupted, UserError
from llm_policy_gen.modes import MODES
from llm_policy_gen.modes.base import Learner, OwnLoop, RunServices, Setup, Step
from llm_policy_gen.run import resume, train
from llm_policy_gen.run.checkpoint import load_checkpoint
from llm_policy_gen.storage.runlog import read_jsonl

STEPS_PER_UPDATE = 61
"""Not a divisor of any episode length here: updates end inside episodes."""


class TinyLearner:
    """Epsilon-greedy Q-learning that steps ``env`` itself, ``STEPS_PER_UPDATE`` steps an update."""

    interrupt_at: tuple[int, int] | None = None
    """(update, step): a Ctrl-C in the middle of that update (the test sets it)."""

    def __init__(self, env: Any, n_states: int, n_actions: int, seed: int) -> None:
        self.env = env
        self.q = np.ones((n_states, n_actions))  # optimistic: it tries every action
        self.rng = np.random.default_rng([seed, 99])
        self.obs: int | None = None
        self.updates = 0
        self.finished: list[tuple[float, int]] = []
        """(return, length) of the episodes that ended in the last update."""
        self._ret, self._len = 0.0, 0

    def update(self) -> None:
        self.finished = []
        for k in range(STEPS_PER_UPDATE):
            if TinyLearner.interrupt_at == (self.updates + 1, k):
                raise KeyboardInterrupt
            if self.obs is None:
                self.obs, _ = self.env.reset()
                self._ret, self._len = 0.0, 0
            s = int(self.obs)
            a = int(self.rng.integers(self.q.shape[1])) if self.rng.random() < 0.3 else int(np.argmax(self.q[s]))
            nxt, r, term, trunc, _ = self.env.step(a)
            self.q[s, a] += 0.5 * (float(r) + (0.0 if term else 0.95 * self.q[nxt].max()) - self.q[s, a])
            self._ret, self._len = self._ret + float(r), self._len + 1
            self.obs = None if term or trunc else int(nxt)
            if self.obs is None:
                self.finished.append((self._ret, self._len))
        self.updates += 1

    def table(self) -> np.ndarray:
        return np.argmax(self.q, axis=1).astype(np.int64)

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q.copy(), "rng": self.rng.bit_generator.state, "obs": self.obs, "updates": self.updates,
                "ret": self._ret, "len": self._len}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        q = np.asarray(state["q"], dtype=np.float64)
        if q.shape != self.q.shape:
            raise ValueError(f"Q table of shape {q.shape}, expected {self.q.shape}")
        self.q = q.copy()
        self.rng.bit_generator.state = state["rng"]
        self.obs = None if state["obs"] is None else int(state["obs"])
        self.updates, self._ret, self._len = int(state["updates"]), float(state["ret"]), int(state["len"])


class TinyLoopMode:
    """A mode with its own loop: one learner update an iteration, the read-out judged by the keeper."""

    name = "tiny-loop"
    needs_session = False
    judges_candidates = True

    def __init__(self) -> None:
        self.setup: Setup | None = None
        self.learner: TinyLearner | None = None

    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        self.setup = setup
        return {"own_loop": "tiny Q-learner"}

    def build_learner(self, run: RunServices) -> Learner:
        assert self.setup is not None
        self.learner = TinyLearner(run.learner_env, self.setup.observation.n_states, self.setup.actions.n_actions,
                                   self.setup.cfg.seed)
        return self.learner

    def start(self, run: RunServices) -> None:
        run.start_from_initial()

    def iterate(self, run: RunServices, iteration: int) -> Step:
        assert self.learner is not None
        step = run.update_learner(iteration)
        assert step.verdict is not None
        keeper = step.verdict.episodes
        step.fields.update(own_returns=[r for r, _ in self.learner.finished],
                           own_steps=sum(n for _, n in self.learner.finished),
                           keeper_episodes=len(keeper), keeper_steps=sum(e.length for e in keeper),
                           read_out=self.learner.table().tolist())
        return step

    def finish(self, run: RunServices) -> dict[str, Any]:
        return {"updates": self.learner.updates if self.learner is not None else 0}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@pytest.fixture
def tiny() -> Iterator[str]:
    MODES.register("tiny-loop", f"{__name__}:TinyLoopMode", description="a tiny own-loop Q-learner (test example)")
    TinyLearner.interrupt_at = None
    yield "tiny-loop"
    TinyLearner.interrupt_at = None
    MODES.unregister("tiny-loop")


def run_cfg(tmp_path: Path, mode: str, **kw: Any) -> Any:
    return cfg(tmp_path, **{"mode": mode, "iterations": 6, "heldout_episodes": 10, "run_id": "r", **kw})


# ----------------------------------------------------------------------------------------------------- the seam
def test_the_example_mode_declares_its_own_loop(tiny: str) -> None:
    mode = MODES.load(tiny)()
    assert isinstance(mode, OwnLoop)
    assert not isinstance(MODES.load("table")(), OwnLoop)


def test_the_run_counts_the_learners_episodes_and_steps_and_judges_its_table(tmp_path: Path, tiny: str) -> None:
    res = train(run_cfg(tmp_path, tiny), log=quiet)
    rd, s = res.run_dir, res.summary
    events = read_jsonl(rd / "events.jsonl")
    assert len(events) == 6 and s["updates"] == 6 and s["iterations"] == 6
    # every episode the learner finished is a training episode of the iteration in which it ended, no other
    assert all(e["train_returns"] == e["own_returns"] for e in events)
    assert sum(len(e["own_returns"]) for e in events) >= 3
    # the run's totals grow by the learner's finished episodes and steps plus the keeper's, nothing else
    for before, e in zip(events, events[1:], strict=False):
        assert e["episodes_total"] - before["episodes_total"] == len(e["own_returns"]) + e["keeper_episodes"]
        assert e["env_steps_total"] - before["env_steps_total"] == e["own_steps"] + e["keeper_steps"]
    # the read-out table is the iteration's one candidate, judged by the keeper and kept when accepted
    assert all(e["candidates"] == 1 and len(e["candidate_means"]) == 1 and e["eval_mean"] is not None
               for e in events)
    for e in events:
        policy = json.loads((rd / "policies" / f"iter_{e['iteration']:04d}.json").read_text())
        assert policy["table"] == e["read_out"]
    accepted = [e for e in events if e["accepted"]]
    assert accepted and s["accepted_count"] == len(accepted)
    best = json.loads((rd / "best_policy.json").read_text())
    assert best["table"] == accepted[-1]["read_out"] and s["best_iteration"] == accepted[-1]["iteration"]
    # the learner's state and the episode in progress are in the run's checkpoint
    state = load_checkpoint(rd / "checkpoint.npz")
    learner = state["learner"]
    assert learner["state"]["updates"] == 6 and np.argmax(learner["state"]["q"], axis=1).tolist() == \
        events[-1]["read_out"]
    assert set(learner["env"]) == {"seed", "state", "states", "actions", "rewards"}
    assert state["iteration"] == 6


def test_a_run_stopped_and_resumed_equals_an_uninterrupted_one(tmp_path: Path, tiny: str) -> None:
    whole = train(run_cfg(tmp_path / "whole", tiny), log=quiet).run_dir
    part = train(run_cfg(tmp_path / "part", tiny, iterations=3), log=quiet).run_dir
    assert load_checkpoint(part / "checkpoint.npz")["learner"]["env"]["seed"] is not None  # inside an episode
    resume(part, {"iterations": 6}, log=quiet)
    assert run_records(part) == run_records(whole)


def test_a_run_interrupted_inside_an_update_resumes_to_the_same_files(tmp_path: Path, tiny: str) -> None:
    """A Ctrl-C in the middle of iteration 4's update: the episodes it had finished are not kept (the checkpoint
    is iteration 3's), and the resumed run redoes the iteration as the uninterrupted one did it."""
    whole = train(run_cfg(tmp_path / "whole", tiny), log=quiet).run_dir
    TinyLearner.interrupt_at = (4, 20)
    with pytest.raises(RunInterrupted):
        train(run_cfg(tmp_path / "cut", tiny), log=quiet)
    cut = tmp_path / "cut" / "FrozenLake-v1" / "r"
    assert [e["iteration"] for e in read_jsonl(cut / "events.jsonl")] == [1, 2, 3]
    TinyLearner.interrupt_at = None
    resume(cut, {}, log=quiet)
    assert run_records(cut) == run_records(whole)


def test_a_learner_state_that_does_not_fit_is_refused_and_changes_nothing(tmp_path: Path, tiny: str) -> None:
    from llm_policy_gen.run.checkpoint import save_checkpoint

    rd = train(run_cfg(tmp_path, tiny, iterations=2), log=quiet).run_dir
    state = load_checkpoint(rd / "checkpoint.npz")
    assert len(state["learner"]["env"]["states"]) > 0  # the second update ended inside an episode
    state["learner"]["env"]["states"] = np.asarray(state["learner"]["env"]["states"]) + 1  # not what a replay gives
    save_checkpoint(rd / "checkpoint.npz", state)
    before = {p: p.read_bytes() for p in rd.rglob("*") if p.is_file()}
    with pytest.raises(UserError, match="cannot load .*reaches other states"):
        resume(rd, {"iterations": 3}, log=quiet)
    assert before == {p: p.read_bytes() for p in rd.rglob("*") if p.is_file()}
