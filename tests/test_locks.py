"""Two writers at once (issue 19, items 12 and 13): one process writes a run directory or a comparison folder at a
time, a lock left by a killed process does not block, and a killed sweep leaves no worker behind.

Every test runs real processes (``python -m llm_policy_gen`` in a subprocess) against the loopback fake of the
OpenAI API. The fake holds each request it gets (a gate that answers with a long hang) and tells the test when one
has arrived, so the test acts while the first process is known to be inside a run: no sleeps as timing windows.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.openai_server import FAKE_KEY, FakeOpenAIServer, hang
from fakes.tables import CARTPOLE, TableResponder

from llm_policy_gen.cli import main
from llm_policy_gen.storage.locks import HOLDER_FILE
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 300.0
"""Upper bound on waiting for a subprocess to reach the server (it imports gymnasium and the SDKs first)."""


@dataclass
class Gate:
    """Holds the first ``hold`` requests (a hang until the server closes) and lets the others through to the
    responder (so that a second writer that should have been refused does not hang, but shows); counts arrivals."""

    hold: int = 1
    arrivals: int = 0
    arrived: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, body: Any) -> Any:
        with self.arrived:
            self.arrivals += 1
            self.arrived.notify_all()
            held = self.arrivals <= self.hold
        return hang(3600) if held else None

    def wait_for(self, n: int) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: self.arrivals >= n, timeout=WAIT_S), f"{self.arrivals} < {n}"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[FakeOpenAIServer, Gate]]:
    openai_server.clear_env(monkeypatch, openai_server._CLEARED)
    gate = Gate()
    with FakeOpenAIServer(api_key=FAKE_KEY, responder=TableResponder()) as srv:
        srv.gate = gate
        monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
        yield srv, gate


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "fast.toml"
    path.write_text("heldout_episodes = 5\ntrain_episodes = 2\ncandidates = 1\ncache = false\n", encoding="utf-8")
    return path


def _train_args(tmp_path: Path) -> list[str]:
    return ["train", "--env", CARTPOLE, "--backend", "openai:gpt-4.1-mini", "--iterations", "2", "--logs-dir",
            str(tmp_path / "logs"), "--run-id", "r", "--config", str(_config(tmp_path)), "--no-progress",
            "--no-plots"]


def _compare_args(tmp_path: Path, seeds: str = "0", *extra: str) -> list[str]:
    return ["compare", "--env", CARTPOLE, "--backends", "openai:gpt-4.1-mini", "--seeds", seeds, "--iterations",
            "1", "--config", str(_config(tmp_path)), "--out", str(tmp_path / "cmp"), "--no-progress", *extra]


def _start(args: list[str], tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    """``python -m llm_policy_gen ARGS`` with this test's environment (the fake's URL and key), output to files."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    with open(tmp_path / f"{name}.out", "wb") as out, open(tmp_path / f"{name}.err", "wb") as err:
        return subprocess.Popen([sys.executable, "-m", "llm_policy_gen", *args], cwd=tmp_path, env=env, stdout=out,
                                stderr=err)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=WAIT_S)


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def _second_writer_refused(gate: Gate, capsys: pytest.CaptureFixture[str], tmp_path: Path, first_args: list[str],
                           second_args: list[str], folder: Path, command: str) -> None:
    """``first_args`` in a subprocess; once it is inside its run, ``second_args`` (in a second subprocess) is refused
    with exit 2 and one line naming the first process and ``folder``, having sent nothing; then the first process is
    killed."""
    first = _start(first_args, tmp_path, "first")
    try:
        gate.wait_for(1)  # the first process is inside its run: it holds the lock
        note = json.loads((folder / HOLDER_FILE).read_text(encoding="utf-8"))
        assert note["pid"] == first.pid and note["host"] and command in note["command"]
        assert FAKE_KEY not in json.dumps(note)
        second = _start(second_args, tmp_path, "second")
        assert second.wait(timeout=WAIT_S) == 2
        line = _one_line((tmp_path / "second.err").read_text(encoding="utf-8"))
        assert f"pid {first.pid}" in line and command in line and str(folder) in line
        assert gate.arrivals == 1  # the refused writer sent nothing
    finally:
        _kill(first)
    assert (folder / HOLDER_FILE).is_file()  # the killed holder's note is left behind


# --- 12: a run directory ---------------------------------------------------------------------------------------------
def test_a_second_writer_of_a_run_directory_is_refused_and_a_killed_holder_does_not_block(
    server: tuple[FakeOpenAIServer, Gate], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "logs" / CARTPOLE / "r"
    resume = ["train", "--resume", str(run), "--no-progress"]
    _second_writer_refused(server[1], capsys, tmp_path, _train_args(tmp_path), resume, run, "train")
    code = main(resume)  # the killed holder's lock does not block
    err = capsys.readouterr().err
    assert code == 0, err
    events = read_jsonl(run / "events.jsonl")
    assert [e["iteration"] for e in events] == [1, 2]
    assert not (run / HOLDER_FILE).exists()  # a holder that ends removes its note


# --- 12: a comparison folder -----------------------------------------------------------------------------------------
def test_the_same_compare_twice_on_one_out_is_refused_while_the_first_runs(
    server: tuple[FakeOpenAIServer, Gate], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _compare_args(tmp_path)
    _second_writer_refused(server[1], capsys, tmp_path, args, args, tmp_path / "cmp", "compare")
    code = main(args)
    err = capsys.readouterr().err
    assert code == 0, err
    events = read_jsonl(tmp_path / "cmp" / "runs" / CARTPOLE / "openai-gpt-4.1-mini_s0" / "events.jsonl")
    assert [e["iteration"] for e in events] == [1]


# --- 13: kill -9 of compare --workers 2 ----------------------------------------------------------------------------
def _children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie (an exited process nobody has reaped yet)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads processes from /proc (Linux)")
def test_workers_of_a_killed_compare_end_with_it(
    server: tuple[FakeOpenAIServer, Gate], tmp_path: Path
) -> None:
    gate = server[1]
    gate.hold = 2
    parent = _start(_compare_args(tmp_path, "0-1", "--workers", "2"), tmp_path, "sweep")
    try:
        gate.wait_for(2)  # both workers are inside a run, each waiting on a call
        helpers = _children(parent.pid)
        assert len(helpers) >= 3, helpers  # two workers and the limits' manager (and perhaps a resource tracker)
    finally:
        _kill(parent)
    deadline = time.monotonic() + 60
    while any(_alive(p) for p in helpers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p for p in helpers if _alive(p)] == []


@pytest.mark.parametrize("name", [".lock", HOLDER_FILE])
def test_a_link_in_place_of_a_comparison_folders_lock_files_is_one_line(tmp_path: Path, name: str,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    out.mkdir()
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    (out / name).symlink_to(target)
    code = main(["compare", "--env", "FrozenLake-v1", "--backends", "offline", "--seeds", "0", "--iterations", "1",
                 "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "symbolic link" in err and len(err.splitlines()) == 1, err
    assert target.read_text() == "keep me"
