"""Issue 9, "Hardening: what a new user hit": the items whose tests have no better home, through the command line.

Where the other items are tested: 1 (clients) ``test_llm_engine.py``, ``test_client_*.py``; 2-4 ``test_client_*.py``,
``test_llm_engine.py``; 8 ``test_engine.py``; 9 and 10 (the writes) ``test_runlog.py``; 11-13 (options and
configuration files) ``test_config.py``; 16, 21 (``evaluate --gif``) and 24 ``test_figures.py``; 22-23
``test_plots.py``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pty
import re
import struct
import subprocess
import sys
import termios
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fakes import openai_server
from fakes.tables import CARTPOLE_STATES, render_table_answer

from llm_policy_gen.cli import main
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
fake_ollama = openai_server.fake_ollama
SECRETS = ("GEMINI_API_KEY", "GOOGLE_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL",
           "ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL", "OLLAMA_BASE_URL")


def child_env(tmp: Path) -> dict[str, str]:
    """The environment of a child ``llm-policy-gen``: no keys, no .env, its own cache."""
    env = {k: v for k, v in os.environ.items() if k not in SECRETS}
    env.update(LLM_POLICY_GEN_NO_DOTENV="1", XDG_CACHE_HOME=str(tmp / "cache"), LLM_POLICY_GEN_WORKERS="1")
    return env


def train_args(logs: Path, *extra: str) -> list[str]:
    return ["train", "--backend", "offline", "--iterations", "3", "--candidates", "2", "--heldout-episodes", "5",
            "--logs-dir", str(logs), "--run-id", "r", "--no-plots", *extra]


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture(scope="module")
def piped(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A run whose stderr is a pipe, as under nohup or Slurm."""
    logs = tmp_path_factory.mktemp("piped")
    proc = subprocess.run([sys.executable, "-m", "llm_policy_gen", *train_args(logs)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=child_env(logs))
    assert proc.returncode == 0, proc.stderr
    return proc, logs / "CartPole-v1" / "r"


# ----------------------------------------------------------------------------------------------- item 20
def test_without_a_tty_each_iteration_is_one_plain_line(piped: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, run = piped
    events = read_jsonl(run / "events.jsonl")
    lines = [x for x in proc.stderr.splitlines() if x.startswith("iter ")]
    assert len(lines) == len(events) == 3
    for line, e in zip(lines, events, strict=True):
        cands = "/".join(f"{m:.1f}" for m in e["candidate_means"])
        assert line.startswith(f"iter {e['iteration']}/3: best test {e['best_test_mean']:.1f}, held-out "
                               f"{e['best_eval_mean']:.1f}, candidates 1-2 test means {cands}"), line
        assert re.search(r"; 2 proposals; elapsed \d+\.\d s$", line), line
    assert "\r" not in proc.stderr and "it/s" not in proc.stderr  # no progress bar in a log file


def test_quiet_prints_only_the_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(train_args(tmp_path, "--quiet")) == 0
    out = capsys.readouterr()
    assert out.err == ""
    assert out.out.splitlines()[-1] == f"run directory: {tmp_path / 'CartPole-v1' / 'r'}"


def test_a_best_that_is_still_the_initial_table_is_flagged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    answers = tmp_path / "prose.jsonl"
    # prose, then a valid table worse than the initial one (always push left): none is ever accepted (a run with no
    # valid answer at all is exit 1, issue 29 item 11)
    left = render_table_answer(np.zeros(CARTPOLE_STATES, dtype=np.int64), "always push left")
    answers.write_text("".join(json.dumps({"response_text": t}) + "\n" for t in ("push left, I think", left)))
    code = main(["train", "--backend", f"replay:{answers}", "--iterations", "2", "--candidates", "1",
                 "--repair-attempts", "0", "--heldout-episodes", "3", "--logs-dir", str(tmp_path), "--no-plots"])
    out = capsys.readouterr()
    assert code == 0
    lines = [x for x in out.err.splitlines() if x.startswith("iter ")]
    assert len(lines) == 2 and all("none accepted yet: the best is the initial table" in x for x in lines)
    assert "note: no candidate was ever accepted; the best policy is the initial table" in out.err
    assert "(no candidate was ever accepted: this is the initial table)" in out.out


def test_on_a_terminal_the_bar_names_its_numbers(tmp_path: Path) -> None:
    """Item 7: the progress bar says which mean it shows ("best test", "held-out")."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # a terminal 120 columns wide
    proc = subprocess.Popen([sys.executable, "-m", "llm_policy_gen", *train_args(tmp_path)], stdout=subprocess.PIPE,
                            stderr=slave, cwd=ROOT, env=child_env(tmp_path))
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=300) == 0
    shown = b"".join(chunks).decode(errors="replace")
    assert "best test" in shown and "held-out" in shown and "3/3" in shown
    assert "iter 1/3:" not in shown  # the bar, not the plain lines


# ----------------------------------------------------------------------------------------------- item 7
def test_each_number_is_named_after_what_it_is(piped: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, run = piped
    events = read_jsonl(run / "events.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    # best_eval_mean is the held-out mean everywhere; the test-seed mean has its own name
    assert all(e["best_eval_mean"] == e["heldout_mean"] for e in events)
    assert events[-1]["best_eval_mean"] == summary["best_eval_mean"]
    assert summary["best_test_mean"] == events[-1]["best_test_mean"]
    assert summary["best_eval_episodes"] == 5
    assert f"held-out mean {summary['best_eval_mean']:.2f} over 5 episodes" in proc.stdout


# ----------------------------------------------------------------------------------------------- item 6
def test_evaluate_on_a_run_reproduces_its_best_eval_mean(piped: tuple[subprocess.CompletedProcess[str], Path],
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _, run = piped
    summary = json.loads((run / "summary.json").read_text())
    seeds = json.loads((run / "config.json").read_text())["seeds"]
    assert main(["evaluate", str(run), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["mean"] == pytest.approx(summary["best_eval_mean"]) and got["episodes"] == 5
    assert got["env_id"] == "CartPole-v1" and got["seeds"][0] == seeds["heldout"]
    assert got["seeds"] == [got["seeds"][0], got["seeds"][0] + 4] and len(got["returns"]) == 5
    assert got["min"] == min(got["returns"]) and got["max"] == max(got["returns"])
    assert main(["evaluate", str(run)]) == 0
    assert "on the run's held-out seeds" in capsys.readouterr().out
    first = sorted((run / "policies").glob("iter_*.json"))[0]  # an iteration's policy file: the same seeds
    assert main(["evaluate", str(first), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["seeds"][0] == seeds["heldout"]


# ----------------------------------------------------------------------------------------------- item 5
SLIPPERY_BEST = [0, 3, 3, 3, 0, 0, 0, 0, 3, 1, 0, 0, 0, 2, 1, 0]
"""A good table for the slippery 4x4 lake (about 0.74); on the non-slippery lake it walks into the wall: 0.0."""


def test_a_policy_copied_out_of_its_run_is_evaluated_on_its_own_environment(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "FrozenLake-v1", "--env-kwargs", '{"is_slippery": true}', "--backend", "offline",
                 "--iterations", "1", "--candidates", "1", "--heldout-episodes", "3", "--logs-dir",
                 str(tmp_path / "logs"), "--run-id", "slip", "--no-plots", "--no-progress"])
    assert code == 0
    data = json.loads((tmp_path / "logs" / "FrozenLake-v1" / "slip" / "best_policy.json").read_text())
    data["table"] = SLIPPERY_BEST
    copied = tmp_path / "elsewhere" / "lake.json"  # no config.json beside it
    copied.parent.mkdir()
    copied.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["evaluate", str(copied), "--episodes", "100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["mean"] > 0.5
    assert main(["evaluate", str(copied), "--env-kwargs", '{"is_slippery": false}']) == 2
    line = one_line(capsys.readouterr().err)
    assert "is_slippery=True in the policy, False here" in line and "{" not in line


# ----------------------------------------------------------------------------------------------- item 10
def failing(monkeypatch: pytest.MonkeyPatch, name: str, fragment: str, after: int) -> Callable[[], None]:
    """``os.<name>`` on a file whose path holds ``fragment`` fails with ENOSPC from its ``after``-th call on (a
    write first lets half its bytes through, as a full disk does); returns the function that restores it."""
    real = getattr(os, name)
    calls = {"n": 0}

    def fake(fd: int, *rest: Any) -> Any:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if fragment in target:
            calls["n"] += 1
            if calls["n"] == after and name == "write":
                return real(fd, bytes(rest[0])[: len(rest[0]) // 2])
            if calls["n"] >= after:
                raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, *rest)

    monkeypatch.setattr(os, name, fake)
    return lambda: monkeypatch.setattr(os, name, real)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="maps descriptors to files through /proc")
@pytest.mark.parametrize(("name", "fragment", "after", "kept"), [
    ("write", "transcripts.jsonl", 5, 2),  # two lines per iteration (K = 2): the 5th is iteration 3's first
    ("write", "events.jsonl", 2, 1),
    ("fsync", ".checkpoint.npz.", 3, 1),  # checkpoint 0 is written before iteration 1
])
def test_a_full_disk_names_the_run_directory_and_what_it_keeps(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str,
        fragment: str, after: int, kept: int) -> None:
    restore = failing(monkeypatch, name, fragment, after)
    code = main(train_args(tmp_path, "--iterations", "4", "--no-progress"))
    restore()
    run = tmp_path / "CartPole-v1" / "r"
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "Traceback" not in "\n".join(err)
    assert err[-1].startswith("llm-policy-gen train: failed: [Errno 28] disk full while writing"), err[-1]
    assert f"the run directory {run} keeps iterations 1..{kept} (resume with `train --resume {run}`" in err[-1]
    for jsonl in ("transcripts.jsonl", "events.jsonl"):
        text = (run / jsonl).read_text()
        assert text.endswith("\n") and all(json.loads(x) for x in text.splitlines())  # no half line
    assert not list(run.rglob("*.tmp"))
    assert json.loads((run / "summary.json").read_text())["iterations"] == kept
    # with room again the run goes on from what it kept
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert [e["iteration"] for e in read_jsonl(run / "events.jsonl")] == [1, 2, 3, 4]


# ----------------------------------------------------------------------------------------------- item 13
@pytest.mark.parametrize(("backend", "variable", "temperature", "accepted"), [
    ("openai", "OPENAI_API_KEY", "2.5", "0 to 2"),
    ("anthropic", "ANTHROPIC_API_KEY", "1.5", "0 to 1"),
    ("gemini", "GEMINI_API_KEY", "2.5", "0 to 2"),
])
def test_a_temperature_outside_the_providers_range_is_refused_before_any_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], backend: str,
        variable: str, temperature: str, accepted: str) -> None:
    monkeypatch.setenv(variable, "fake-key-0123456789")
    code = main(["train", "--backend", backend, "--temperature", temperature, "--base-url", "http://127.0.0.1:9/v1",
                 "--iterations", "1", "--logs-dir", str(tmp_path)])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and f"temperature {float(temperature)} is outside the range" in line and accepted in line
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]  # nothing was started


def test_a_temperature_for_a_backend_that_samples_no_model_is_said_to_do_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "FrozenLake-v1", "--backend", "offline", "--temperature", "0.3", "--iterations",
                 "1", "--logs-dir", str(tmp_path), "--no-progress", "--no-plots"])
    assert code == 0
    assert "note: --temperature has no effect on this run's backend offline" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------- item 14
@pytest.mark.parametrize(("env_id", "kwargs", "fragment"), [
    ("CartPole-v1", '{"foo": 1}', "TypeError: CartPoleEnv.__init__() got an unexpected keyword argument 'foo'"),
    ("FrozenLake-v1", '{"map_name": "9x9"}', "KeyError: '9x9'"),
])
def test_bad_environment_keyword_arguments_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        env_id: str, kwargs: str, fragment: str) -> None:
    code = main(["train", "--env", env_id, "--env-kwargs", kwargs, "--backend", "offline", "--logs-dir",
                 str(tmp_path)])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and f"{env_id}: gymnasium cannot make it with keyword arguments" in line and fragment in line


# ----------------------------------------------------------------------------------------------- item 15
CORRIDOR = '''
    import gymnasium as gym


    class Corridor(gym.Env):
        """Walk right along a corridor of six cells to its end."""

        def __init__(self):
            self.observation_space = gym.spaces.Discrete(6)
            self.action_space = gym.spaces.Discrete(2)
            self.pos = 0

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.pos = 0
            return self.pos, {}

        def step(self, action):
            self.pos = max(0, min(5, self.pos + (1 if int(action) == 1 else -1)))
            return self.pos, float(self.pos == 5), self.pos == 5, False, {}


    gym.register("LPGCorridor-v0", entry_point=Corridor, max_episode_steps=30)
'''


@pytest.fixture
def corridor_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "lpg_hardening_corridor.py").write_text(textwrap.dedent(CORRIDOR))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "lpg_hardening_corridor"


def test_a_users_own_environment_trains_as_module_colon_id(tmp_path: Path, corridor_module: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    env_id = f"{corridor_module}:LPGCorridor-v0"
    code = main(["train", "--env", env_id, "--backend", "offline", "--iterations", "2", "--candidates", "1",
                 "--heldout-episodes", "3", "--logs-dir", str(tmp_path / "logs"), "--run-id", "c", "--no-plots",
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "logs" / "lpg_hardening_corridor-LPGCorridor-v0" / "c"
    assert json.loads((run / "best_policy.json").read_text())["env_id"] == env_id
    assert main(["evaluate", str(run), "--json", "--env", env_id]) == 0  # the module is imported when named


def test_an_environment_module_that_cannot_be_imported_is_one_line(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "lpg_no_such_module:Corridor-v0", "--backend", "offline", "--logs-dir",
                 str(tmp_path)])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "cannot import module 'lpg_no_such_module'" in line and "gymnasium.register" in line


# ----------------------------------------------------------------------------------------------- item 21
def test_train_help_lists_every_backend(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # argparse would wrap "q-learning" at its hyphen
    assert main(["train", "--help"]) == 0
    help_text = capsys.readouterr().out
    for name in ("offline", "replay", "gemini", "openai", "anthropic", "ollama", "q-learning", "random"):
        assert re.search(rf"\b{re.escape(name)}\b", help_text), name


# ----------------------------------------------------------------------------------------------- item 1
def test_backends_says_configured_for_ollama_only_when_its_server_answers(
        fake_ollama: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def ollama(*args: str) -> Any:
        assert main(["backends", *args]) == 0
        out = capsys.readouterr().out
        if "--json" in args:
            return next(r for r in json.loads(out)["backends"] if r["name"] == "ollama")["configured"]
        return next(x for x in out.splitlines() if x.startswith("ollama"))

    assert ollama("--json") is None and "not checked" in ollama()
    assert ollama("--json", "--check") is True
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://127.0.0.1:9")
    assert ollama("--json", "--check") is False
    assert " no " in ollama("--check")

