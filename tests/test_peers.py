"""bench/peers.py, bench/zoo.py, bench/peer_train.py and the peer columns of bench/suite.py: the zoo's YAML read from
the installed rl-zoo3, policy_kwargs parsed without evaluation, the untuned fallback, budgets taken from the suite's
results, tiny end-to-end PPO and DQN runs, checkpoint and resume. Needs the `peers` extra (`make test` installs it)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import time
from importlib import util
from pathlib import Path
from types import ModuleType

import pytest
import yaml

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    """(suite, peers), imported as the scripts import each other (bench/ first on the path)."""
    monkeypatch.syspath_prepend(str(BENCH))
    for name, value in (("OMP_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1")):  # run_one sets them: undone after
        monkeypatch.setenv(name, value)
    return importlib.import_module("suite"), importlib.import_module("peers")


@pytest.fixture
def zoo(bench) -> ModuleType:
    return importlib.import_module("zoo")


def _zoo_yaml(algo: str) -> dict:
    """The package's file, found without importing rl_zoo3 (which patches gymnasium's TimeLimit)."""
    spec = util.find_spec("rl_zoo3")
    assert spec is not None and spec.submodule_search_locations
    return yaml.safe_load((Path(spec.submodule_search_locations[0]) / "hyperparams" / f"{algo}.yml").read_text())


def _suite_record(task: str, seed: int, heldout: float, within: float, backend: str = "offline", **extra) -> dict:
    return {"task": task, "env_id": "CartPole-v1", "backend": backend, "seed": seed, "budget": 100,
            "heldout": heldout, "heldout_within": within, "episodes": 110, "reached_at": 50 if heldout >= 475 else None,
            "wall_s": 1.0, "cpu_s": 1.0, "iterations": 3, "stop": "max_episodes", **extra}


def _peer_record(task: str, algo: str, seed: int, heldout: float | None, kind: str = "steps",
                 reached: bool = True) -> dict:
    rec = {"task": task, "env_id": "CartPole-v1", "algo": algo, "seed": seed, "kind": kind,
           "hyperparameters": f"rl-zoo3 2.9.2 {algo}.yml CartPole-v1"}
    if heldout is None:
        return {**rec, "error": "RuntimeError: boom"}
    if not reached:
        return {**rec, "reached": False, "out_of_reach": "needs about 9 CPU-h"}
    return {**rec, "heldout": heldout, "episodes": 100, "steps": 2000, "reached": True}


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


def test_a_task_without_an_entry_runs_untuned_never_under_another_entry(bench, zoo):
    _, peers = bench
    for algo, env_id in (("ppo", "Taxi-v4"), ("dqn", "Taxi-v4"), ("dqn", "CliffWalking-v1"),
                         ("ppo", "FrozenLake-v1")):
        hyper = zoo.hyperparameters(algo, env_id)
        assert not hyper.tuned and hyper.kwargs == {} and hyper.normalize is None and hyper.n_envs == 1
        assert hyper.source.startswith("untuned: SB3 defaults")
        assert peers.budget_for("zoo", hyper, (1000, 50)) == "no zoo budget (untuned)"
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


def test_the_equal_budgets_come_from_the_suite_results(bench, tmp_path):
    """env_steps_total from the record, or from the run's summary.json for a record written before it existed;
    the episode count from the record; a failed or missing offline run gives no budget."""
    _, peers = bench
    suite_peers = importlib.import_module("suite_peers")  # bench/ on the path through the fixture
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text(json.dumps({"env_steps_total": 4321}))
    records = [_suite_record("cartpole", 0, 500.0, 480.0, env_steps_total=1234),
               _suite_record("cartpole", 1, 500.0, 480.0, run_dir=str(run)),
               _suite_record("cartpole", 2, 9.0, 9.0, backend="random", env_steps_total=99),
               {"task": "cartpole", "backend": "offline", "seed": 3, "error": "boom"}]
    assert suite_peers.offline_budget(records, "cartpole", 0) == (1234, 110)
    assert suite_peers.offline_budget(records, "cartpole", 1) == (4321, 110)
    assert suite_peers.offline_budget(records, "cartpole", 2) is None
    assert suite_peers.offline_budget(records, "cartpole", 3) is None
    steps = peers.budget_for("steps", None, (1234, 110))
    episodes = peers.budget_for("episodes", None, (1234, 110))
    assert (steps.kind, steps.target, steps.horizon) == ("steps", 1234, 1234)
    assert (episodes.kind, episodes.target, episodes.horizon) == ("episodes", 110, 1234)
    assert "no finished offline run" in peers.budget_for("steps", None, None)


@pytest.mark.slow
def test_suite_records_gain_env_steps_total(bench, tmp_path, monkeypatch):
    """bench/suite.py's record of a finished run carries the run's step count (from its summary)."""
    suite, _ = bench
    suite_goals = importlib.import_module("suite_goals")
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")  # run_one sets it for its process: undone after the test
    rec = suite.run_one(suite_goals.Goal("tiny", "CartPole-v1", 4, 475, "", ""), "offline", 0, tmp_path)
    summary = json.loads((Path(rec["run_dir"]) / "summary.json").read_text())
    assert rec["env_steps_total"] == summary["env_steps_total"] > 0


def _write_suite(out: Path, steps: int, episodes: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps([{**_suite_record("cartpole", 0, 500.0, 480.0),
                                                   "episodes": episodes, "env_steps_total": steps}]))


@pytest.mark.slow
def test_tiny_ppo_and_dqn_runs_end_to_end_with_their_records(bench, tmp_path, capsys):
    """The command trains PPO and DQN (zoo-tuned) to offline's step count, writes peers.json, peers.md and the
    suite.md columns; each record names its source, steps, episodes, budget reached, CPU and the curve."""
    _, peers = bench
    out = tmp_path / "suite"
    _write_suite(out, steps=300, episodes=20)
    assert peers.main(["--tasks", "cartpole", "--seeds", "0", "--budgets", "steps", "--curve-points", "2",
                       "--curve-episodes", "2", "--out", str(out)]) == 0
    records = {r["algo"]: r for r in json.loads((out / "peers.json").read_text())}
    assert sorted(records) == ["dqn", "ppo"]
    for algo, rec in records.items():
        assert "error" not in rec, rec
        assert rec["hyperparameters"] == f"rl-zoo3 {importlib.import_module('zoo').zoo_version()} {algo}.yml " \
                                         "CartPole-v1"
        assert rec["kind"] == "steps" and rec["target"] == 300 and rec["reached"]
        assert 300 <= rec["steps"] < 300 + 8  # exactly the budget (PPO: 8 environments step together)
        assert rec["episodes"] > 0 and rec["cpu_s"] > 0 and rec["heldout_episodes"] == 100
        assert 8.0 <= rec["heldout"] <= 500.0
        assert len(rec["curve"]) == 2 and rec["curve"][-1][0] == rec["steps"]
    page = (out / "suite.md").read_text()
    assert "| CartPole-v1 | PPO = steps | 0 |" in page and "| CartPole-v1 | DQN = steps | 0 |" in page \
        and "rl-zoo3" in page and (out / "img" / "curves_cartpole.png").is_file()
    details = (out / "peers.md").read_text()
    assert "| cartpole | DQN | steps 300 | 0 |" in details and "## Out of reach on these cores\n\nNone." in details
    # again: the finished runs are kept, not trained again
    assert peers.main(["--tasks", "cartpole", "--seeds", "0", "--budgets", "steps", "--out", str(out)]) == 0
    assert "held-out" not in capsys.readouterr().out.split("wrote")[-1]
    # offline re-judged (another step count): the cell is stale, trained again to the new count in its own folder
    _write_suite(out, steps=320, episodes=20)
    assert peers.main(["--tasks", "cartpole", "--seeds", "0", "--algos", "dqn", "--budgets", "steps",
                       "--curve-points", "2", "--curve-episodes", "2", "--out", str(out)]) == 0
    again = {r["algo"]: r for r in json.loads((out / "peers.json").read_text())}
    assert again["dqn"]["target"] == 320 and 320 <= again["dqn"]["steps"] and not again["dqn"].get("reused")
    assert again["dqn"]["run_dir"] != records["dqn"]["run_dir"] and Path(records["dqn"]["run_dir"]).is_dir()
    assert again["ppo"] == records["ppo"]  # not asked for: left as it was
    # ... and the page shows no cell trained to the old count (PPO's), only the new DQN one
    page = (out / "suite.md").read_text()
    assert "| CartPole-v1 | DQN = steps | 0 |" in page and "PPO = steps" not in page


@pytest.mark.slow
def test_a_run_over_the_cpu_budget_is_listed_out_of_reach_with_no_figure(bench, tmp_path):
    _, peers = bench
    opts = {"curve_points": 4, "curve_episodes": 1, "cpu_hours": 1e-9, "checkpoint_minutes": 10.0,
            "heldout_episodes": 2}
    rec = peers.run_one("cartpole", "dqn", 0, "steps", tmp_path, (2000, 50), opts)
    assert not rec["reached"] and "heldout" not in rec and rec["steps"] < 2000
    assert "CPU-h" in rec["out_of_reach"] and rec["reference"].startswith("none: the installed rl-zoo3")
    assert (Path(rec["run_dir"]) / "checkpoint" / "model.zip").is_file()  # a larger budget resumes it
    assert "- cartpole DQN steps 2,000, seed 0: needs about" in peers.details([rec])


def _holder(folder: Path) -> subprocess.Popen:
    """Another process holding ``folder``'s lock (as a second peers.py or a left-over worker would) until its
    standard input closes."""
    code = ("import sys; from pathlib import Path; from llm_policy_gen.storage.locks import FolderLock; "
            "held = FolderLock(Path(sys.argv[1]), 'the peer run', program='bench/peers.py').acquire(); "
            "print('held', flush=True); sys.stdin.read()")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_run_another_process_trains_is_an_error_row_naming_it_and_writes_nothing(bench, tmp_path):
    """A cell whose folder another process holds is not trained a second time beside it: the row names the holder
    and the checkpoint is left as it was; once the holder is gone the run resumes."""
    _, peers = bench
    opts = {"curve_points": 4, "curve_episodes": 1, "cpu_hours": 1.0, "checkpoint_minutes": 10.0,
            "heldout_episodes": 2}
    cut = peers.run_one("cartpole", "dqn", 0, "steps", tmp_path, (400, 50), {**opts, "stop_after_segments": 1})
    run_dir = Path(cut["run_dir"])
    books = (run_dir / "checkpoint" / "books.json").read_bytes()
    holder = _holder(run_dir)
    try:
        busy = peers.run_one("cartpole", "dqn", 0, "steps", tmp_path, (400, 50), opts)
    finally:
        holder.communicate("")
    assert busy["error"].startswith("FolderBusy: the peer run") and f"pid {holder.pid}" in busy["error"]
    assert "bench/peers.py" in busy["error"] and "heldout" not in busy
    assert (run_dir / "checkpoint" / "books.json").read_bytes() == books
    done = peers.run_one("cartpole", "dqn", 0, "steps", tmp_path, (400, 50), opts)
    assert done["reached"] and done["resumed"] == 1 and "error" not in done


def _ended(pid: int) -> bool:
    """The process is gone, or a zombie nobody reaps (a container's first process may not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_peers_command_leaves_no_worker_training(bench, tmp_path):
    """kill -9 of bench/peers.py ends its worker too (it would otherwise train on, holding the run's lock against
    the next invocation): the worker found through the run's lock note ends without finishing the run."""
    out = tmp_path / "suite"
    _write_suite(out, steps=300, episodes=20)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BENCH.parent), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(BENCH / "peers.py"), "--tasks", "cartpole", "--seeds", "0", "--algos", "dqn",
           "--budgets", "zoo", "--curve-points", "2", "--curve-episodes", "1", "--out", str(out)]
    parent = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        note = None
        for _ in range(1200):  # the worker starts, imports torch and takes the run's lock
            notes = list((out / "peers").glob("*/*/.lock.holder.json"))
            if notes:
                try:
                    note = json.loads(notes[0].read_text())
                    break
                except ValueError:  # being written
                    pass
            assert parent.poll() is None, "peers.py ended before its worker trained"
            time.sleep(0.1)
        assert note is not None and note["pid"] != parent.pid and not _ended(note["pid"])
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    for _ in range(600):
        if _ended(note["pid"]):
            break
        time.sleep(0.1)
    left = not _ended(note["pid"])
    if left:
        os.kill(note["pid"], signal.SIGKILL)
    assert not left, "the worker trained on after its peers.py was killed"
    assert not list(out.glob("peers/*/*/result.json")), "the worker finished the run after its peers.py was killed"


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["dqn", "ppo"])
def test_an_interrupted_run_resumes_to_the_same_result(bench, tmp_path, algo):
    """Stopped after its first segment (checkpointed), then resumed: the same curve and held-out figure as the
    run that was not interrupted (seeded; environments, replay buffer and generators restored)."""
    _, peers = bench
    opts = {"curve_points": 3, "curve_episodes": 2, "cpu_hours": 1.0, "checkpoint_minutes": 10.0,
            "heldout_episodes": 3}
    whole = peers.run_one("cartpole", algo, 0, "steps", tmp_path / "a", (1200, 50), opts)
    cut = peers.run_one("cartpole", algo, 0, "steps", tmp_path / "b", (1200, 50), {**opts, "stop_after_segments": 1})
    assert not cut["reached"] and len(cut["curve"]) == 1 and "heldout" not in cut
    resumed = peers.run_one("cartpole", algo, 0, "steps", tmp_path / "b", (1200, 50), opts)
    assert resumed["resumed"] == 1 and not resumed["fresh_episodes_on_resume"]
    assert resumed["curve"] == whole["curve"] and resumed["heldout"] == whole["heldout"]
    assert resumed["steps"] == whole["steps"] and resumed["episodes"] == whole["episodes"]


@pytest.mark.slow
def test_an_equal_episodes_cell_stopped_where_the_equal_steps_run_stopped_is_that_run(bench, tmp_path):
    """Every Pendulum-v1 episode lasts 200 steps: SAC (one environment) trained to offline's 400 steps has run
    offline's 2 episodes at its last step, so the equal-episodes cell is that run, not a second one; trained on its
    own it gives the same curve and figure. CartPole-v1's episodes end early: there the cells are two runs."""
    _, peers = bench
    opts = {"curve_points": 2, "curve_episodes": 1, "cpu_hours": 1.0, "checkpoint_minutes": 10.0,
            "heldout_episodes": 3}
    steps = peers.run_one("pendulum", "sac", 0, "steps", tmp_path / "a", (400, 2), opts)
    shared = peers.run_one("pendulum", "sac", 0, "episodes", tmp_path / "a", (400, 2), opts)
    alone = peers.run_one("pendulum", "sac", 0, "episodes", tmp_path / "b", (400, 2), opts)
    assert steps["reached"] and steps["before_last"] == [399, 1] and (steps["steps"], steps["episodes"]) == (400, 2)
    assert shared["same_run_as"] == shared["run_dir"] == steps["run_dir"] and shared["target"] == 2 \
        and shared["reached"]
    assert "same_run_as" not in alone and (alone["steps"], alone["episodes"]) == (400, 2)
    assert (shared["heldout"], shared["curve"]) == (alone["heldout"], alone["curve"])
    assert "| pendulum | SAC | episodes 2 | 0 |" in peers.details([steps, shared]) \
        and "| yes (the steps run) |" in peers.details([shared])
    # the plan counts it as done
    cell = peers.plan_cell("pendulum", "sac", 0, "episodes", tmp_path / "a", (400, 2), None, False,
                           peers.plan_hyperparameters("sac", "Pendulum-v1"), opts)
    assert cell.status == "done"
    cart = peers.run_one("cartpole", "dqn", 0, "steps", tmp_path / "c", (300, 20), opts)
    own = peers.run_one("cartpole", "dqn", 0, "episodes", tmp_path / "c", (300, 20), opts)
    assert cart["episodes"] != 20 and "same_run_as" not in own and own["episodes"] == 20 and own["reached"]


@pytest.mark.slow
def test_a_resumed_run_keeps_its_normalisation_statistics(bench, tmp_path, zoo):
    """PPO with the zoo's VecNormalize (as on MountainCar or Hopper): statistics and running returns saved with the
    checkpoint, so the resumed run equals the uninterrupted one."""
    _, peers = bench
    train = importlib.import_module("peer_train")
    hyper = zoo.hyperparameters("ppo", "CartPole-v1")
    hyper.normalize = {"gamma": 0.98}
    results = []
    for folder, stops in (("a", [None]), ("b", [1, None])):
        for stop in stops:
            fields = train.train(tmp_path / folder, "ppo", hyper, peers.EnvFactory("CartPole-v1"),
                                 train.Budget("steps", 700, 700), 100_000, [50_000, 50_001], 2, 256, 3600.0, 0.0,
                                 stop_after_segments=stop)
        results.append(fields)
    whole, resumed = results
    assert resumed["resumed"] == 1 and (tmp_path / "b" / "checkpoint" / "vecnormalize.pkl").is_file()
    assert resumed["curve"] == whole["curve"] and resumed["heldout"] == whole["heldout"]


def test_bad_options_are_one_line_and_exit_2(bench, tmp_path, capsys):
    _, peers = bench
    assert peers.main(["--algos", "a2c", "--out", str(tmp_path / "x")]) == 2
    assert peers.main(["--budgets", "hours", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "unknown algorithm or budget 'a2c'" in err[0] and "'hours'" in err[1]
    assert not (tmp_path / "x").exists()


def test_algorithms_by_action_space(bench):
    _, peers = bench
    assert peers.algos_for(True, ["ppo", "dqn", "sac"]) == ["ppo", "dqn"]
    assert peers.algos_for(False, ["ppo", "dqn", "sac", "trpo"]) == ["ppo", "sac", "trpo"]


def test_tasks_that_differ_only_in_their_table_share_the_environment_folder(bench):
    _, peers = bench
    assert peers.setup_id("LunarLander-v3.products") == peers.setup_id("LunarLander-v3")
    assert peers.setup_id("CartPole-v1") != peers.setup_id("LunarLander-v3")


def test_seed_stats_worst_and_count(bench):
    suite_goals = importlib.import_module("suite_goals")  # bench/ on the path through the fixture
    cart = suite_goals.BY_KEY["cartpole"]
    assert suite_goals.seed_stats(cart, [500.0, 224.0, 480.0, None]) == (224.0, "2/4")
    cliff = suite_goals.BY_KEY["cliffwalking"]  # an exact goal
    assert suite_goals.seed_stats(cliff, [-13.0, -12.0, -15.0]) == (-15.0, "1/3")


def _known_baselines(out: Path, tasks: dict[str, str], seeds: range) -> None:
    """random_policy.json and priors.json as if measured, so that write_report measures nothing."""
    out.mkdir(parents=True, exist_ok=True)
    for name, value in (("random_policy.json", 20.0), ("priors.json", 200.0)):
        (out / name).write_text(json.dumps({"heldout_episodes": 100, "tasks": {
            t: {"env_id": e, "by_seed": {str(s): value for s in seeds}} for t, e in tasks.items()}}))


def test_suite_md_has_iqm_worst_met_and_every_peer_column(bench):
    suite, peers = bench
    report, curves = importlib.import_module("suite_report"), importlib.import_module("suite_curves")
    records = [_suite_record("cartpole", 0, 500.0, 480.0), _suite_record("cartpole", 1, 300.0, 290.0),
               _suite_record("cartpole", 2, 490.0, 470.0), _suite_record("cartpole", 0, 150.0, 150.0, "random")]
    peer_records = [_peer_record("cartpole", "ppo", 0, 245.0), _peer_record("cartpole", "ppo", 1, 200.0),
                    _peer_record("cartpole", "ppo", 2, None), _peer_record("cartpole", "ppo", 3, 0, reached=False),
                    _peer_record("cartpole", "dqn", 0, 9.0, kind="zoo"),
                    {"task": "cartpole", "algo": "dqn", "seed": 0, "kind": "steps", "not_run": "no offline run"},
                    *[{**_peer_record("taxi", "dqn", s, -200.0), "hyperparameters": "untuned: SB3 defaults"}
                      for s in range(2)]]
    cells = peers.cells(peer_records)
    # a cell not run (no budget) is no column; a failed seed and one out of reach are missing values
    assert [(c.task, c.column, c.values, c.unreached) for c in cells] == [
        ("cartpole", "PPO = steps", (245.0, 200.0, None, None), 1), ("cartpole", "DQN zoo budget", (9.0,), 0),
        ("taxi", "DQN = steps", (-200.0, -200.0), 0)]
    runs = curves.suite_runs(records) + curves.peer_runs(peer_records)
    random = {"cartpole": {s: 20.0 for s in range(4)}}
    page = report.markdown(records, "a note", cells, runs, random)
    lines = page.splitlines()
    tables = [line for line in lines if line.startswith("| task")]
    assert len(tables) == 2
    for header in tables:  # every row has its table's columns
        block = lines[lines.index(header):]
        rows = block[2:next((i for i, x in enumerate(block) if not x.startswith("|")), len(block))]
        assert rows and all(r.count("|") == header.count("|") for r in rows), rows
    offline = next(r for r in lines if "| offline |" in r and "CartPole" in r)
    # IQM of 500, 300, 490 (3 runs: nothing trimmed) and the normalised score (R = 20, goal 475)
    assert "**430.0 [" in offline and "(seeds 0-2) | 0.90 [" in offline and "| 300.0 | 2/3 | 470.0 (290.0, 1/3) |" \
        in offline
    ppo = next(r for r in lines if "| PPO = steps |" in r)
    assert "| 0-1 | **222.5 [200.0, 245.0]** |" in ppo and "2 of 4 seeds without a figure" in ppo \
        and "rl-zoo3 2.9.2 ppo.yml CartPole-v1" in ppo
    taxi = next(r for r in lines if r.startswith("| Taxi-v4 | DQN = steps"))
    assert "**-200.00 [-200.00, -200.00]** | n/a |" in taxi and "untuned: SB3 defaults" in taxi
    assert "x offline" not in page and "ratio to" not in page and "×" not in page


def test_write_report_keeps_the_other_scripts_part_and_reads_old_cells(bench, tmp_path):
    suite, peers = bench
    _known_baselines(tmp_path, {"cartpole": "CartPole-v1"}, range(2))
    (tmp_path / "results.json").write_text(json.dumps([_suite_record("cartpole", 0, 500.0, 480.0)]))
    suite.write_report(tmp_path, note="suite note")
    suite.write_report(tmp_path, peers=peers.cells([_peer_record("cartpole", "ppo", 0, 125.0)]))
    page = (tmp_path / "suite.md").read_text()
    assert "suite note" in page and "| CartPole-v1 | PPO = steps | none |" in page
    suite.write_report(tmp_path, note="a later suite note")  # the suite again: the peer column stays
    page = (tmp_path / "suite.md").read_text()
    assert "a later suite note" in page and "| PPO = steps |" in page and "\nsuite note\n" not in page
    # a report.json of the sbx peers (capped, same_as) still reads
    (tmp_path / "report.json").write_text(json.dumps({"note": "n", "peers": [
        {"task": "cartpole", "column": "sbx PPO", "values": [9.0, 9.5], "capped": 1, "error": None,
         "same_as": None}]}))
    suite.write_report(tmp_path)
    assert "| CartPole-v1 | sbx PPO | none |" in (tmp_path / "suite.md").read_text()


def test_the_readme_has_one_line_per_task_with_its_verdict(bench, tmp_path):
    suite, peers = bench
    records = [_suite_record("cartpole", s, 500.0, w) for s, w in enumerate([480.0, 490.0, 476.0, 224.0, 500.0,
                                                                            477.0, 499.0, 481.0, 475.0, 300.0])]
    records += [{**_suite_record("taxi", s, 7.0, 7.0), "env_id": "Taxi-v4"} for s in range(10)]
    _known_baselines(tmp_path, {"cartpole": "CartPole-v1", "taxi": "Taxi-v4"}, range(10))
    (tmp_path / "results.json").write_text(json.dumps(records))
    suite.write_report(tmp_path, note="n", peers=peers.cells([_peer_record("cartpole", "ppo", 0, 250.0)]))
    lines = (tmp_path / "readme.md").read_text().splitlines()
    assert len(lines) == 2 and lines[0].startswith("- **CartPole-v1**") and lines[1].startswith("- **Taxi-v4**")
    assert "offline 478.5 (seeds 0-9), 8/10 seeds meet it, worst 224.0: **met**; held-out IQM 500.0 [500.0, " \
           "500.0], normalised 1.05 [1.05, 1.05]; PPO = steps 250.0 [250.0, 250.0] (final held-out, 1 of 1 seeds " \
           "run, 0 meet the goal)." in lines[0]
    assert "offline 7.00 (seeds 0-9), 0/10 seeds meet it, worst 7.00: not met; held-out IQM 7.00" in lines[1]


def test_merge_moves_a_parts_finished_runs_and_records_into_the_suite(bench, tmp_path):
    suite, _ = bench
    out, part = tmp_path / "suite", tmp_path / "part"
    for folder, seeds in ((out, (0, 1)), (part, (1, 2))):
        records = []
        for s in seeds:
            run = folder / "runs" / "CartPole-v1" / f"cartpole_b100_offline_s{s}"
            run.mkdir(parents=True)
            (run / "summary.json").write_text("{}")
            records.append({**_suite_record("cartpole", s, 500.0, 480.0 + s + (10 if folder == part else 0)),
                            "run_dir": str(run)})
        (folder / "results.json").write_text(json.dumps(records + [{"task": "cartpole", "env_id": "CartPole-v1",
                                                                      "backend": "offline", "seed": 3,
                                                                      "error": "boom", "budget": 100}]))
    assert suite.main(["--out", str(out), "--merge", str(part)]) == 0
    merged = {r["seed"]: r for r in json.loads((out / "results.json").read_text())}
    assert sorted(merged) == [0, 1, 2, 3]  # out's failed seed 3 stays; the part's is not carried over
    # seed 1's run folder is in both: out's stays with its record; seed 2 moves over with the part's record
    assert merged[1]["heldout_within"] == 481.0 and merged[2]["heldout_within"] == 492.0
    for s in (1, 2):
        assert Path(merged[s]["run_dir"]) == out / "runs" / "CartPole-v1" / f"cartpole_b100_offline_s{s}"
        assert Path(merged[s]["run_dir"], "summary.json").is_file()
    assert not (part / "runs" / "CartPole-v1" / "cartpole_b100_offline_s2").exists()
    assert "- **CartPole-v1**" in (out / "readme.md").read_text()
    assert suite.main(["--out", str(out), "--merge", str(tmp_path / "nothing")]) == 2
    # --merge with --report: the runs are merged (not only the report rewritten), under the note given
    run = part / "runs" / "CartPole-v1" / "cartpole_b100_offline_s4"
    run.mkdir(parents=True)
    (run / "summary.json").write_text("{}")
    record = {**_suite_record("cartpole", 4, 500.0, 499.0), "run_dir": str(run)}
    # two records of one run folder (offline-neutral on a spec without a prior is the offline run): both carried
    (part / "results.json").write_text(json.dumps([record, {**record, "backend": "offline-neutral"}]))
    assert suite.main(["--out", str(out), "--merge", str(part), "--report", "merged note"]) == 0
    after = json.loads((out / "results.json").read_text())
    assert {r["seed"] for r in after} == {0, 1, 2, 3, 4}
    assert {r["run_dir"] for r in after if r["seed"] == 4} == {str(out / "runs" / "CartPole-v1" / run.name)}
    assert {r["backend"] for r in after if r["seed"] == 4} == {"offline", "offline-neutral"}
    assert json.loads((out / "report.json").read_text())["note"] == "merged note"


def test_two_invocations_on_one_folder_keep_each_others_records(bench, tmp_path):
    """peers.json is re-read under a lock and only the invocation's own cells replaced: a second peers.py on the
    same folder (another task beside a long queue) loses nothing of the first's, and a re-run cell replaces its
    old record."""
    _, peers = bench
    path = tmp_path / "peers.json"
    a = {"task": "acrobot", "algo": "dqn", "seed": 0, "kind": "steps", "heldout": -90.0}
    b = {"task": "cartpole", "algo": "ppo", "seed": 0, "kind": "steps", "heldout": 400.0}
    peers.save_records(path, [a])
    peers.save_records(path, [b])  # a writer that never saw a
    b2 = {**b, "heldout": 450.0}
    everything = peers.save_records(path, [b2])
    assert everything == json.loads(path.read_text()) == [a, b2]


def test_plan_projects_what_is_left_from_rates_measured_here_and_trains_nothing(bench, tmp_path, capsys):
    """``--plan``: per task, algorithm and budget, the seeds done, the runs to go (an interrupted run counts what its
    checkpoint has), their CPU hours at the rate finished runs of that task and algorithm measured, and whether one
    whole run is over ``--cpu-hours``; an algorithm never finished here is unknown, not guessed."""
    from peer_train import Budget

    suite, peers = bench
    out = tmp_path / "suite"
    out.mkdir()
    (out / "results.json").write_text(json.dumps([{**_suite_record("cartpole", s, 500.0, 480.0),
                                                   "env_steps_total": 10_000} for s in range(3)]))
    done = {**_peer_record("cartpole", "ppo", 0, 480.0), "steps": 10_000, "cpu_s": 10.0, "target": 10_000}
    (out / "peers.json").write_text(json.dumps([done]))
    partial = peers.run_dir_for(out, "cartpole", "ppo", "steps", Budget("steps", 10_000, 10_000), 1) / "checkpoint"
    partial.mkdir(parents=True)
    (partial / "books.json").write_text(json.dumps({"steps": 4_000, "episodes": 40, "cpu_s": 4.0}))
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    assert peers.main(["--plan", "--tasks", "cartpole", "--algos", "ppo,dqn", "--budgets", "steps,zoo",
                       "--seeds", "0-2", "--cpu-hours", "0.002", "--out", str(out)]) == 0
    page = capsys.readouterr().out
    assert page == (out / "peers_plan.md").read_text()
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == sorted([*before, Path("peers_plan.md")])
    rows = {tuple(cell.strip() for cell in line.split("|")[1:4]): [c.strip() for c in line.split("|")[4:-1]]
            for line in page.splitlines() if line.startswith("| cartpole")}
    # 6,000 + 10,000 steps to go at 1,000 a CPU second; a whole run 10,000 steps = 0.0028 CPU-h > 0.002
    assert rows[("cartpole", "PPO", "steps")] == ["1/3", "2", "1,000", "0.0", "0.00", "**yes**"]
    zoo_steps = 100_000  # the zoo's n_timesteps for PPO on CartPole-v1, three runs to go
    assert rows[("cartpole", "PPO", "zoo")] == ["0/3", "3", "1,000", f"{3 * zoo_steps / 1000 / 3600:,.1f}",
                                                f"{zoo_steps / 1000 / 3600:,.2f}", "**yes**"]
    assert rows[("cartpole", "DQN", "steps")][3] == "unknown: no finished run of it here"
    assert "and 6 runs with no rate to project from" in page
