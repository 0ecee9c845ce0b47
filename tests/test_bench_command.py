"""``llm-policy-gen bench SUITE`` (issue 61 items 2 and 5): a suite's cells run through the sweep, resumably, each
finished cell recorded as it ends; a cell with a record is done, a finished run on disk is adopted, an interrupted
one resumed and never recorded; refusals exit 2 in one line and write nothing; ``--list`` writes nothing.

The suites are small TOML files written by the tests: CartPole-v1 and CliffWalking-v1, seeds 0-1, 20 episodes.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_command_line import child_env, one_line
from test_compare_signals import _lines

from llm_policy_gen.cli import main
from llm_policy_gen.run.files import RunDir
from llm_policy_gen.run.view import RunState
from llm_policy_gen.suites.harvest import command_of
from llm_policy_gen.suites.store import read_records

ROOT = Path(__file__).resolve().parents[1]

def task(key: str, env_id: str, goal: float, budget: int = 20, settings: str = "heldout_episodes = 5") -> str:
    """A ``[[task]]`` of a suite TOML file."""
    return (f'\n[[task]]\nkey = "{key}"\nenv_id = "{env_id}"\nbudget = {budget}\ngoal = {goal}\n'
            f"settings = {{ {settings} }}\n")


TASKS = task("cartpole", "CartPole-v1", 475.0) + task("cliff", "CliffWalking-v1", -13.0)

METHODS = """
[[method]]
label = "offline"
entry = "offline"

[[method]]
label = "q-learning"
entry = "@q-learning"

[[method]]
label = "ql-at-offline"
entry = "ql-at-offline=@q-learning"
budget = "episodes-of:offline"
"""


def write_suite(tmp_path: Path, methods: str = METHODS, tasks: str = TASKS, name: str = "tiny") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[suite]\nname = "{name}"\nseeds = "0-1"\n{methods}{tasks}', encoding="utf-8")
    return path


def bench(suite: Path, out: Path, *extra: str) -> int:
    return main(["bench", str(suite), "--out", str(out), *extra])


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (lock files aside), by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and ".lock" not in p.name}


# ---------------------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(("argv", "says"), [
    (["nosuch"], "unknown suite 'nosuch'"),
    (["SUITE", "--tasks", "nope"], "unknown task 'nope' in suite tiny"),
    (["SUITE", "--methods", "nosuch:model"], "unknown backend 'nosuch'"),
    (["SUITE", "--seeds", "3-1"], "bad --seeds '3-1'"),
    (["SUITE", "--budget-usd", "-1"], "bad --budget-usd -1"),
    (["SUITE", "--workers", "0"], "bad --workers 0: accepted an integer >= 1"),  # as the old bench scripts' --workers
    (["SUITE", "--methods", "offline=@q-learning"], "its name 'offline' is a method of suite tiny"),
    (["SUITE", "--methods", "x=offline@direct", "--tasks", "cliff"], "cliff/x cannot run: --mode direct needs"),
])
def test_refused_inputs_exit_2_in_one_line_and_write_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             argv: list[str], says: str) -> None:
    suite = write_suite(tmp_path)
    out = tmp_path / "out"
    argv = [str(suite) if a == "SUITE" else a for a in argv]
    assert main(["bench", *argv, "--out", str(out)]) == 2
    line = one_line(capsys.readouterr().err)
    assert line.startswith("llm-policy-gen bench: error: ") and says in line, line
    assert not out.exists() and not (tmp_path / "tiny").exists()


def test_a_bad_suite_file_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = write_suite(tmp_path, methods=METHODS.replace("episodes-of:offline", "episodes-of:nobody"))
    assert bench(bad, tmp_path / "out") == 2
    assert "budget names 'nobody'" in one_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_list_prints_the_plan_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path)
    out = tmp_path / "out"
    assert bench(suite, out, "--list") == 0
    text = capsys.readouterr().out
    assert "suite tiny: 12 cells: 0 recorded, 0 finished on disk (adopted, not run)" in text
    assert "8 to run, 4 waiting, 0 not run" in text
    assert "  cartpole/offline seed 0: to run: 20 episodes" in text
    assert "  cliff/ql-at-offline seed 1: waiting: waits for offline seed 1's record (episodes-of offline)" in text
    assert "projected for the cells to run: 12 cells, 160 episodes" in text
    assert not out.exists() and not (tmp_path / "tiny").exists()


def test_a_suite_limit_lists_the_cell_with_its_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capped = '[[method]]\nlabel = "random"\nentry = "random"\nmax_states = 100\n'
    assert bench(write_suite(tmp_path, methods=capped), tmp_path / "out", "--list") == 0
    text = capsys.readouterr().out
    assert "  cartpole/random seed 0: not run: random is not run on tables of more than 100 states (this task's " \
           "has 324)" in text
    assert "  cliff/random seed 0: to run: 20 episodes" in text


# ---------------------------------------------------------------------------------------------------- running
@pytest.mark.slow
def test_a_suite_runs_records_each_cell_then_runs_nothing_again(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    suite = write_suite(tmp_path)
    out = tmp_path / "out"
    assert bench(suite, out, "--publish") == 0, capsys.readouterr().err
    records = read_records(out)
    assert len(records) == 12 and {r.method for r in records} == {"offline", "q-learning", "ql-at-offline"}
    assert [r.to_json() for r in read_records(tmp_path / "tiny")] == [r.to_json() for r in records]  # --publish
    by = {(r.task, r.method, r.seed): r for r in records}
    for (task, method, seed), r in by.items():
        run = RunDir(out / task / "runs" / r.env_id / f"{method}_s{seed}").read()
        assert run.state is RunState.FINISHED
        assert r.result["heldout_mean"] == run.summary["best_heldout_mean"]
        assert r.result["episodes"] == run.summary["episodes_total"] and r.curve
        if method == "ql-at-offline":  # the derived budget: offline's counted episodes on the same task and seed
            assert r.budget == {"max_episodes": by[(task, "offline", seed)].result["episodes"]}
        else:
            assert r.budget == {"max_episodes": 20}
    with open(out / "tiny_seeds.csv", newline="", encoding="utf-8") as fh:  # one row per record shown
        assert len(list(csv.DictReader(fh))) == 12
    before = snapshot(out)
    assert bench(suite, out) == 0
    captured = capsys.readouterr()
    assert "12 recorded" in captured.err and "nothing to run" in captured.err and "(0 new records)" in captured.out
    assert snapshot(out) == before


@pytest.mark.slow
def test_runs_compare_made_in_the_same_layout_are_adopted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    settings = tmp_path / "s.toml"
    settings.write_text("heldout_episodes = 5\n", encoding="utf-8")
    assert main(["compare", "--env", "CartPole-v1", "--methods", "offline", "--seeds", "0-1", "--max-episodes", "20",
                 "--iterations", "100000", "--config", str(settings), "--out", str(out / "cartpole"),
                 "--no-progress"]) == 0
    events = {s: (out / f"cartpole/runs/CartPole-v1/offline_s{s}/events.jsonl").read_bytes() for s in (0, 1)}
    capsys.readouterr()
    assert bench(write_suite(tmp_path), out, "--tasks", "cartpole", "--methods", "offline") == 0
    err = capsys.readouterr().err
    assert "2 finished on disk (adopted, not run)" in err and err.count("finished earlier: adopted") == 2, err
    assert {s: (out / f"cartpole/runs/CartPole-v1/offline_s{s}/events.jsonl").read_bytes() for s in (0, 1)} == events
    records = read_records(out)
    assert [r.seed for r in records] == [0, 1]
    run = RunDir(out / "cartpole/runs/CartPole-v1/offline_s0").read()
    assert records[0].command == command_of(run) and " bench " not in records[0].command  # the command that ran it
    assert records[0].code.endswith("+unknown (adopted)")  # made by other code than the one recording it


@pytest.mark.slow
def test_a_run_stopped_by_sigterm_is_resumed_and_never_recorded_as_a_result(tmp_path: Path) -> None:
    suite = write_suite(tmp_path, tasks=task("cliff", "CliffWalking-v1", -13.0, budget=600))
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "llm_policy_gen", "bench", str(suite), "--out", str(out), "--tasks", "cliff",
            "--methods", "offline", "--seeds", "0"]
    run = out / "cliff" / "runs" / "CliffWalking-v1" / "offline_s0"
    proc = subprocess.Popen(argv, cwd=ROOT, env=child_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a window
        while _lines(run / "events.jsonl") < 1:
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith(f"interrupted by SIGTERM: the comparison folder {out} keeps 0 "
                                                   "of 1 runs finished"), err
    assert RunDir(run).state() is RunState.INTERRUPTED
    stopped_at = json.loads((run / "summary.json").read_text(encoding="utf-8"))["iterations"]
    assert read_records(out) == []  # an interrupted run is never a result
    done = subprocess.run(argv, cwd=ROOT, env=child_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "1 resumable" in done.stderr and "(resumed)" in done.stderr
    (rec,) = read_records(out)
    assert rec.result["stop_reason"].startswith("episode budget reached") and rec.result["iterations"] > stopped_at


def test_a_cell_whose_source_is_not_run_waits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert bench(write_suite(tmp_path), out, "--methods", "ql-at-offline", "--seeds", "0") == 0
    err = capsys.readouterr().err
    assert "2 waiting" in err and "cartpole/ql-at-offline seed 0: waiting: waits for offline seed 0's record" in err
    assert read_records(out) == [] and not list(out.rglob("config.json"))


@pytest.mark.slow
def test_a_peer_at_offlines_steps_runs_in_a_second_phase(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("stable_baselines3")
    if importlib.util.find_spec("rl_zoo3") is None:  # found, not imported: importing it patches gymnasium's TimeLimit
        pytest.skip("rl-zoo3 is not installed")
    methods = METHODS.split("[[method]]\nlabel = \"q-learning\"")[0] + """
[[method]]
label = "ppo-at-offline"
entry = "ppo-at-offline=@peer[peer_algo=ppo]"
budget = "steps-of:offline"
iterations = 2
max_steps = 100000

[[method]]
label = "ppo-capped"
entry = "ppo-capped=@peer[peer_algo=ppo]"
budget = "steps-of:offline"
iterations = 2
max_steps = 100
"""
    out = tmp_path / "out"
    assert bench(write_suite(tmp_path, methods=methods), out, "--tasks", "cartpole", "--seeds", "0") == 0, \
        capsys.readouterr().err
    by = {r.method: r for r in read_records(out)}
    assert set(by) == {"offline", "ppo-at-offline"}
    assert by["ppo-at-offline"].budget == {"max_steps": by["offline"].result["env_steps"]}
    assert by["ppo-at-offline"].settings == {"iterations": 2, "peer_algo": "ppo"}  # a peer takes no task settings
    assert by["ppo-at-offline"].result["peer_source"].startswith("rl-zoo3 ")
    steps = by["offline"].result["env_steps"]
    assert f"cartpole/ppo-capped seed 0: not run: its budget of {steps:,} steps is over ppo-capped's max_steps 100" \
        in capsys.readouterr().err


def test_a_failed_run_is_not_recorded_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    replay = tmp_path / "garbage.jsonl"
    replay.write_text("".join(json.dumps({"iteration": i, "candidate": c, "response_text": "no table here"}) + "\n"
                              for i in (1, 2) for c in range(1, 5)), encoding="utf-8")
    out = tmp_path / "out"
    assert bench(write_suite(tmp_path), out, "--tasks", "cartpole", "--seeds", "0", "--methods",
                 f"q-learning,bad=replay:{replay}") == 1
    err = capsys.readouterr().err
    assert "cartpole/bad seed 0: FAILED: NoValidAnswer" in err and "1 cell ran and did not finish" in err
    assert [r.method for r in read_records(out)] == ["q-learning"]


def test_two_methods_whose_runs_would_share_a_folder_are_refused(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    twice = '[[method]]\nlabel = "a"\nentry = "offline"\n\n[[method]]\nlabel = "b"\nentry = "offline"\n'
    assert bench(write_suite(tmp_path, methods=twice), tmp_path / "out", "--list") == 2
    assert "bad suite tiny: 'b' and 'a' would share run directories (offline_s0, ...)" in \
        one_line(capsys.readouterr().err)
