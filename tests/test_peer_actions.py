"""``--mode peer`` on continuous tasks: the learner acts in the environment's own ``Box`` (``--peer-actions native``,
the default), as under the RL Baselines3 Zoo, and SAC and TD3 run (issue 61 item 1, native actions).

A killed PPO run with the zoo's gSDE entry (MountainCarContinuous-v0) resumes to the uninterrupted run's files, its
episode in progress replayed from the actions as given; ``evaluate`` reproduces its held-out mean; SAC and TD3 build,
run and are reproduced by ``evaluate``, and refuse to resume; an old peer run (no ``peer_actions`` in its
config.json) resumes with the spec's action indices; the combinations that cannot run are refused in one line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from run_helpers import kill_and_resume
from test_lm_policy import one_line
from test_peer_mode import _files, needs_peers, peer_records

from llm_policy_gen.cli import main
from llm_policy_gen.run.checkpoint import load_checkpoint
from llm_policy_gen.run.files import RunDir


def _evaluated(run: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


@needs_peers
@pytest.mark.slow
def test_a_killed_continuous_peer_run_resumes_to_the_uninterrupted_result(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # the zoo's PPO for MountainCarContinuous-v0: gSDE, log_std_init, VecNormalize, 8-step rollouts
    cut, ref = kill_and_resume(tmp_path, ["--mode", "peer", "--peer-algo", "ppo", "--max-steps", "1024",
                                          "--heldout-episodes", "3"], "MountainCarContinuous-v0", iterations=4,
                               after=1, records=peer_records)
    assert cut == ref
    assert [e["peer_steps"] for e in ref["events"]] == [256, 512, 768, 1024]
    assert ref["facts"]["action_space"] == "box" and ref["facts"]["use_sde"] is True
    assert ref["summary"]["episodes_total"] == 1  # a 999-step episode finished, the next one in progress
    run = tmp_path / "MountainCarContinuous-v0" / "ref"
    config = RunDir(run).load_config()
    assert config is not None and config["config"]["peer_actions"] == "native"
    assert config["peer"]["actions"] == "the environment's own (Box)"
    env_state = load_checkpoint(RunDir(run).checkpoint)["learner"]["env"]
    given = np.asarray(env_state["env_actions"])
    assert given.dtype == np.float32 and given.shape == (1024 - 999, 1)
    got = _evaluated(run, capsys)
    assert got["seeds_are_heldout"] and got["mean"] == pytest.approx(ref["summary"]["best_eval_mean"], abs=1e-9)


def _train(tmp_path: Path, env_id: str, *args: str) -> list[str]:
    return ["train", "--env", env_id, "--mode", "peer", "--logs-dir", str(tmp_path / "logs"), "--no-plots",
            "--quiet", *args]


@needs_peers
@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac", "td3"])
def test_sac_and_td3_run_on_a_continuous_task_evaluate_reproduces_them_and_resume_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], algo: str) -> None:
    assert main(_train(tmp_path, "Pendulum-v1", "--peer-algo", algo, "--max-steps", "300", "--iterations", "1",
                       "--heldout-episodes", "3", "--run-id", algo)) == 0
    run = tmp_path / "logs" / "Pendulum-v1" / algo
    rd = RunDir(run)
    facts = json.loads(rd.network_policy[0].read_text())
    assert facts["policy_class"] == {"sac": "SACPolicy", "td3": "TD3Policy"}[algo]
    assert facts["action_space"] == "box"
    config = rd.load_config()
    assert config is not None and config["peer"]["hyperparameters_source"].endswith(f"{algo}.yml Pendulum-v1")
    summary = rd.load_summary()
    assert summary is not None and summary["env_steps_total"] == 200  # one 200-step episode finished
    assert _evaluated(run, capsys)["mean"] == pytest.approx(summary["best_eval_mean"], abs=1e-9)
    before = _files(run)
    assert main(["train", "--resume", str(run), "--iterations", "2"]) == 2
    assert "replay buffer is not in the checkpoint" in one_line(capsys.readouterr().err)
    assert _files(run) == before


@needs_peers
@pytest.mark.slow
def test_an_old_peer_run_without_peer_actions_resumes_with_the_spec_action_indices(tmp_path: Path) -> None:
    """A run's config.json written before ``peer_actions`` existed resumes as it ran: the spec's action indices
    (Hopper-v5's 27 levels), step for step as a ``--peer-actions spec`` run resumed the same way."""
    def run_and_extend(run_id: str, strip: bool) -> dict[str, Any]:
        assert main(_train(tmp_path, "Hopper-v5", "--peer-actions", "spec", "--max-steps", "512", "--iterations", "1",
                           "--heldout-episodes", "3", "--run-id", run_id)) == 0
        run = tmp_path / "logs" / "Hopper-v5" / run_id
        if strip:  # as a peer run recorded it before the option
            record = json.loads((run / "config.json").read_text())
            del record["config"]["peer_actions"], record["peer"]["peer_actions"]
            (run / "config.json").write_text(json.dumps(record, indent=2))
        assert main(["train", "--resume", str(run), "--iterations", "2", "--max-steps", "1024", "--quiet"]) == 0
        return peer_records(run)

    old, spec = run_and_extend("old", strip=True), run_and_extend("spec", strip=False)
    assert old == spec
    assert old["facts"]["action_space"] == "discrete" and old["facts"]["n_actions"] == 27
    assert [e["peer_steps"] for e in old["events"]] == [512, 1024]


@needs_peers
@pytest.mark.parametrize(("env_id", "args", "says"), [
    ("CartPole-v1", ["--peer-algo", "sac"], "sac needs continuous actions, and CartPole-v1's are discrete"),
    ("CartPole-v1", ["--peer-algo", "td3"], "td3 needs continuous actions"),
    ("Pendulum-v1", ["--peer-algo", "sac", "--peer-actions", "spec"], "use --peer-actions native"),
    ("Pendulum-v1", ["--peer-algo", "dqn"], "give --peer-actions spec"),
    ("MountainCarContinuous-v0", ["--peer-actions", "spec"], "uses gSDE, which needs continuous actions"),
    ("Pendulum-v1", ["--peer-actions", "both"], "invalid choice: 'both'"),
])
def test_a_peer_whose_actions_do_not_fit_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                 env_id: str, args: list[str], says: str) -> None:
    assert main(_train(tmp_path, env_id, "--iterations", "1", "--max-steps", "64", *args)) == 2
    assert says in one_line(capsys.readouterr().err)
    assert not any((tmp_path / "logs").rglob("config.json")) if (tmp_path / "logs").exists() else True


def test_the_nearest_level_of_a_box_action_is_its_recorded_index() -> None:
    from llm_policy_gen.discretize import BoxActions
    from llm_policy_gen.run.learner_env import nearest_level

    levels = BoxActions([-1.0, -2.0], [1.0, 2.0], 3)  # values -1, 0, 1 and -2, 0, 2
    assert nearest_level(levels, np.array([-1.0, -2.0], dtype=np.float32)) == 0
    assert nearest_level(levels, np.array([0.4, 1.2], dtype=np.float32)) == 1 * 3 + 2
    assert nearest_level(levels, np.array([5.0, -0.9], dtype=np.float32)) == 2 * 3 + 1  # past the box: the edge
    assert all(nearest_level(levels, levels.to_env(np.array([a]))[0]) == a for a in range(levels.n_actions))


CONTINUOUS = ["MountainCarContinuous-v0", "Pendulum-v1", "Hopper-v5", "Walker2d-v5", "Swimmer-v5", "Reacher-v5",
              "InvertedPendulum-v5", "InvertedDoublePendulum-v5", "BipedalWalker-v3"]


@needs_peers
@pytest.mark.slow
@pytest.mark.parametrize("env_id", CONTINUOUS)
def test_the_zoo_ppo_entry_of_each_continuous_task_builds_on_its_box_and_its_policy_file_acts_as_sb3(
        env_id: str) -> None:
    """The zoo's PPO for each continuous task of the goal table builds over native learner environments (no
    learning), and the network rebuilt from its policy arrays gives SB3's deterministic actions, inside the box."""
    from llm_policy_gen.envs import get_spec
    from llm_policy_gen.peers.network_policy import NetworkPolicy
    from llm_policy_gen.peers.sb3_learner import PeerLearner
    from llm_policy_gen.peers.zoo import hyperparameters
    from llm_policy_gen.run.learner_env import LearnerEnv

    seeds = iter(range(1000))
    first = LearnerEnv(get_spec(env_id), lambda: next(seeds), lambda e: e)
    first.use_native_actions()
    hyper = hyperparameters("ppo", env_id)
    assert hyper.tuned and hyper.n_timesteps is not None
    learner = PeerLearner([first, *(first.sibling() for _ in range(hyper.n_envs - 1))], hyper, "ppo", 0,
                          hyper.n_timesteps, 1)
    space = first.env.action_space
    assert learner.model.action_space == space
    policy = NetworkPolicy(*learner.policy_arrays())
    assert policy.native_actions and policy.facts["use_sde"] == bool(hyper.kwargs.get("use_sde"))
    obs = np.stack([first.env.observation_space.sample() for _ in range(5)])
    acts = policy.act(obs)
    assert acts.shape == (5, *space.shape) and acts.dtype == space.dtype
    assert np.all(acts >= space.low) and np.all(acts <= space.high)
    norm = learner.model.get_vec_normalize_env()
    expected, _ = learner.model.predict(obs if norm is None else norm.normalize_obs(obs), deterministic=True)
    np.testing.assert_array_equal(acts, expected)


@needs_peers
def test_a_zoo_entry_that_wraps_the_environment_is_refused_naming_the_wrapper() -> None:
    from llm_policy_gen.errors import UserError
    from llm_policy_gen.peers.zoo import hyperparameters

    with pytest.raises(UserError) as caught:  # the zoo's SAC for CarRacing-v3 names FrameSkip, an autoencoder, ...
        hyperparameters("sac", "CarRacing-v3")
    line = str(caught.value)
    assert "\n" not in line and "env_wrapper: " in line and "FrameSkip" in line and "not supported" in line
