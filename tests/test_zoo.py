"""llm_policy_gen/peers/zoo.py: the RL Baselines3 Zoo's YAML read from the installed rl-zoo3 (what ``--mode peer``
trains with), policy_kwargs parsed without evaluation, the untuned fallback. Needs the `peers` extra (`make test`
installs it). The zoo-tuned peers are runs of the product (`--mode peer`, tests/test_peer_mode.py); their records are
the suites' (tests/test_suite_records.py)."""

from __future__ import annotations

import sys
from importlib import util
from pathlib import Path
from types import ModuleType

import pytest
import yaml


@pytest.fixture
def zoo() -> ModuleType:
    from llm_policy_gen.peers import zoo

    return zoo


def _zoo_yaml(algo: str) -> dict:
    """The package's file, found without importing rl_zoo3 (which patches gymnasium's TimeLimit)."""
    spec = util.find_spec("rl_zoo3")
    assert spec is not None and spec.submodule_search_locations
    return yaml.safe_load((Path(spec.submodule_search_locations[0]) / "hyperparams" / f"{algo}.yml").read_text())


def test_the_zoo_entry_is_read_from_the_installed_package(zoo):
    """DQN on CartPole-v1: every value of the package's own entry reaches the algorithm's arguments, policy_kwargs
    parsed; n_timesteps is the zoo budget."""
    entry = _zoo_yaml("dqn")["CartPole-v1"]
    hyper = zoo.hyperparameters("dqn", "CartPole-v1")
    assert hyper.tuned and hyper.source == f"rl-zoo3 {zoo.zoo_version()} dqn.yml CartPole-v1"
    assert hyper.n_timesteps == int(entry["n_timesteps"]) and hyper.n_envs == 1 and hyper.normalize is None
    expected = {k: v for k, v in entry.items() if k not in ("n_timesteps", "policy", "policy_kwargs")}
    assert {k: v for k, v in hyper.kwargs.items() if k != "policy_kwargs"} == expected
    assert hyper.kwargs["policy_kwargs"] == {"net_arch": [256, 256]}
    assert "rl_zoo3" not in sys.modules  # read, not imported: importing it patches gymnasium's TimeLimit
    # PPO on CartPole-v1: n_envs, and lin_X strings as linear schedules from X to 0
    ppo_entry = _zoo_yaml("ppo")["CartPole-v1"]
    ppo = zoo.hyperparameters("ppo", "CartPole-v1")
    assert ppo.n_envs == ppo_entry["n_envs"]
    start = float(ppo_entry["learning_rate"].split("_")[1])
    assert ppo.kwargs["learning_rate"](1.0) == pytest.approx(start)
    assert ppo.kwargs["learning_rate"](0.25) == pytest.approx(start / 4)


def test_mujoco_v5_takes_the_v4_entry_labelled_and_normalize_takes_gamma(zoo):
    hyper = zoo.hyperparameters("ppo", "Hopper-v5")
    entry = _zoo_yaml("ppo")["Hopper-v4"]
    assert hyper.source.endswith("ppo.yml Hopper-v4 (used for Hopper-v5)")
    assert hyper.normalize == {"gamma": entry["gamma"]}
    import torch

    assert hyper.kwargs["policy_kwargs"]["activation_fn"] is torch.nn.ReLU
    assert zoo.hyperparameters("ppo", "InvertedPendulum-v5").source.endswith("(used for InvertedPendulum-v5)")
    # an older version is borrowed only for MuJoCo tasks
    assert zoo.find_entry({"LunarLander-v2": {}}, "LunarLander-v3") is None


def test_a_task_without_an_entry_runs_untuned_never_under_another_entry(zoo):
    for algo, env_id in (("ppo", "Taxi-v4"), ("dqn", "Taxi-v4"), ("dqn", "CliffWalking-v1"),
                         ("ppo", "FrozenLake-v1")):
        hyper = zoo.hyperparameters(algo, env_id)
        assert not hyper.tuned and hyper.kwargs == {} and hyper.normalize is None and hyper.n_envs == 1
        assert hyper.source.startswith("untuned: SB3 defaults")
    assert "default" in _zoo_yaml("dqn")  # the zoo's catch-all exists and is not used


@pytest.mark.parametrize("text", [
    "__import__('os').system('touch /tmp/x')", "dict(a=open('/etc/passwd'))", "dict(f=eval('1'))",
    "dict(x=nn.Module)", "dict(**kw)", "[1, 2]", "lambda: dict()", "dict(a=1) if True else 0", "dict(a=os.sep)",
    "dict(net_arch=[256, 256]", "(nn.ReLU).__class__"])
def test_policy_kwargs_parser_refuses_anything_but_literals_and_known_torch_names(zoo, text):
    with pytest.raises(zoo.ZooError):
        zoo.parse_kwargs(text)


def test_policy_kwargs_parser_reads_the_zoo_forms(zoo):
    import torch

    got = zoo.parse_kwargs("dict(log_std_init=-2,\n ortho_init=False, activation_fn=nn.Tanh,\n"
                           " net_arch=dict(pi=[256, 256], vf=[64]), optimizer_class=th.optim.RMSprop)")
    assert got == {"log_std_init": -2, "ortho_init": False, "activation_fn": torch.nn.Tanh,
                   "net_arch": {"pi": [256, 256], "vf": [64]}, "optimizer_class": torch.optim.RMSprop}
    assert zoo.parse_kwargs("{'norm_obs': True, 'norm_reward': False}") == {"norm_obs": True, "norm_reward": False}
