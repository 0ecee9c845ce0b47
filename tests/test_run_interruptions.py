"""Issue 29 (hardening, round 4), items 1, 8, 9 and 11: a refused ``--resume`` changes no file, SIGTERM and SIGHUP
are handled as Ctrl-C is, a failed write never splits an iteration between the run's files, and a run whose answers
were all refused ends with exit 1.

Signals come from inside the run at a chosen iteration (a ``--log`` writer registered here sends them), or, for the
real process, once the run's first iteration is on disk; failed writes come from a file size limit
(``RLIMIT_FSIZE``) set in the child process before it starts: no wall-time window decides anything.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.openai_server import FakeOpenAIServer, ok
from run_helpers import answer, comparable, write_replay
from test_command_line import child_env, one_line

from llm_policy_gen.cli import main
from llm_policy_gen.loggers.writers import LOGGERS
from llm_policy_gen.run.checkpoint import load_checkpoint, save_checkpoint
from llm_policy_gen.storage.locks import HOLDER_FILE, LOCK_FILES
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
fake_openai = openai_server.fake_openai


def files_of(run: Path) -> dict[str, bytes]:
    """Every file of a run directory and its bytes (the lock's own files aside)."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name not in LOCK_FILES}


def lake_args(logs: Path, *extra: str) -> list[str]:
    return ["train", "--env", "FrozenLake-v1", "--iterations", "2", "--heldout-episodes", "10", "--logs-dir",
            str(logs), "--run-id", "r", "--no-plots", "--no-progress", *extra]


# ----------------------------------------------------------------------------------------------- item 1
@pytest.fixture
def replayed(tmp_path: Path) -> tuple[Path, Path]:
    """A finished 2-iteration FrozenLake run made from a replay file (answers for 4 iterations); returns the run
    directory and the replay file."""
    replay = tmp_path / "answers.jsonl"
    backend = write_replay(replay, lambda it, c: answer([(it + s) % 4 for s in range(16)], "action"), 4)
    assert main(lake_args(tmp_path / "logs", "--backend", backend)) == 0
    return tmp_path / "logs" / "FrozenLake-v1" / "r", replay


@pytest.fixture
def offline_run(tmp_path: Path) -> Path:
    """A finished 2-iteration offline FrozenLake run."""
    assert main(lake_args(tmp_path / "logs", "--backend", "offline")) == 0
    return tmp_path / "logs" / "FrozenLake-v1" / "r"


def refused_resume(run: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """``train --resume RUN --iterations 4`` refused: exit 2, one line (returned), and every file of the run left
    byte for byte as it was (its summary.json included), the lock's note removed."""
    before = files_of(run)
    assert "summary.json" in before
    capsys.readouterr()
    code = main(["train", "--resume", str(run), "--iterations", "4"])
    line = one_line(capsys.readouterr().err)
    assert code == 2, line
    assert files_of(run) == before
    assert not (run / HOLDER_FILE).exists()
    return line


def test_a_resume_refused_because_its_replay_file_is_gone_changes_no_file(
        replayed: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    run, replay = replayed
    replay.unlink()
    line = refused_resume(run, capsys)
    assert f"replay file {replay} does not exist" in line, line


def test_a_resume_refused_because_its_model_file_is_gone_changes_no_file(
        offline_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A run of a local GGUF model whose file was moved away (its config.json names it; no model is needed to make
    the run: an offline run's configuration is pointed at the file that is gone)."""
    record = json.loads((offline_run / "config.json").read_text())
    gone = tmp_path / "moved" / "model.gguf"
    record["config"]["backend"] = f"llamacpp:{gone}"
    (offline_run / "config.json").write_text(json.dumps(record, indent=2))
    line = refused_resume(offline_run, capsys)
    assert f"llamacpp model file {gone} does not exist" in line, line


def _set(state: dict[str, Any], dotted: str, value: Any) -> None:
    *path, last = dotted.split(".")
    for key in path:
        state = state[key]
    state[last] = value


@pytest.mark.parametrize(("field", "value"), [
    ("iteration", "two"),
    ("wall_s", "soon"),
    ("keeper.best_iteration", [1]),
    ("keeper.best_table", [0, 1]),  # a table that does not fit the environment's 16 states
    ("memory", 5),
])
def test_a_checkpoint_with_a_mistyped_field_is_one_line_and_changes_no_file(
        offline_run: Path, capsys: pytest.CaptureFixture[str], field: str, value: Any) -> None:
    state = load_checkpoint(offline_run / "checkpoint.npz")
    _set(state, field, value)
    save_checkpoint(offline_run / "checkpoint.npz", state)
    line = refused_resume(offline_run, capsys)
    assert f"{offline_run / 'checkpoint.npz'} holds a state this version cannot load" in line, line


# ----------------------------------------------------------------------------------------------- item 8
SIGNAL_AT = {"iteration": 2, "signum": int(signal.SIGTERM)}
"""When the ``signal-at`` writer signals its own process, and with what."""


class SignalAt:
    """A ``--log`` writer that sends ``SIGNAL_AT["signum"]`` to this process as it writes that iteration's record
    (inside the iteration's commit: the signal is held until the record and checkpoint are written)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def write(self, record: dict[str, Any]) -> None:
        if record.get("iteration") == SIGNAL_AT["iteration"]:
            os.kill(os.getpid(), SIGNAL_AT["signum"])

    def close(self) -> None:
        return None


@pytest.fixture
def signal_at() -> Iterator[dict[str, int]]:
    LOGGERS.register("signal-at", f"{__name__}:SignalAt", description="test: signals its own process")
    yield SIGNAL_AT
    LOGGERS.unregister("signal-at")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129), (signal.SIGINT, 130)])
def test_sigterm_and_sighup_end_a_run_as_ctrl_c_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    signal_at: dict[str, int], signum: int, code: int) -> None:
    signal_at["signum"] = int(signum)
    argv = ["train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "5", "--heldout-episodes",
            "5", "--logs-dir", str(tmp_path), "--run-id", "r", "--no-plots", "--no-progress", "--log", "signal-at"]
    before = signal.getsignal(signal.SIGTERM)
    assert main(argv) == code
    run = tmp_path / "CartPole-v1" / "r"
    last = capsys.readouterr().err.strip().splitlines()[-1]
    named = "interrupted" if signum == signal.SIGINT else f"interrupted by {signal.Signals(signum).name}"
    assert last == (f"{named}: the run directory {run} keeps iterations 1..2; go on with: llm-policy-gen train "
                    f"--resume {run}"), last
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["iterations"] == 2
    assert [e["iteration"] for e in read_jsonl(run / "events.jsonl")] == [1, 2]
    assert not (run / HOLDER_FILE).exists()
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers are put back
    signal_at["iteration"] = 0
    try:
        assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    finally:
        signal_at["iteration"] = 2
    assert [e["iteration"] for e in read_jsonl(run / "events.jsonl")] == [1, 2, 3, 4, 5]


def test_sigterm_ends_a_comparison_as_ctrl_c_does(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  signal_at: dict[str, int]) -> None:
    signal_at["signum"] = int(signal.SIGTERM)
    settings = tmp_path / "fast.toml"
    settings.write_text('heldout_episodes = 5\nlog = ["signal-at"]\n', encoding="utf-8")
    out = tmp_path / "cmp"
    code = main(["compare", "--env", "FrozenLake-v1", "--backends", "offline", "--seeds", "0-1", "--iterations", "3",
                 "--config", str(settings), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 143 and "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"interrupted by SIGTERM: the comparison folder {out.resolve()} keeps 0 of 2 runs "
                           "finished; go on with the same command: llm-policy-gen compare --env FrozenLake-v1"), last
    with open(out / "results.csv", newline="") as fh:
        assert [r["status"] for r in csv.DictReader(fh)] == ["interrupted", "interrupted"]
    (first,) = out.glob("runs/FrozenLake-v1/offline_s0")
    assert json.loads((first / "summary.json").read_text())["stop_reason"] == "interrupted"
    assert [e["iteration"] for e in read_jsonl(first / "events.jsonl")] == [1, 2]
    assert json.loads((out / "compare.json").read_text())["interrupted"] is True
    assert not list(out.rglob(HOLDER_FILE))


def _when(ready: Any, proc: subprocess.Popen[str]) -> None:
    """Wait until ``ready()`` holds (the run reached the moment) or the process ended; a poll, not a window."""
    deadline = time.monotonic() + 300
    while not ready() and proc.poll() is None:
        assert time.monotonic() < deadline, "the run never reached the moment"
        time.sleep(0.01)


def test_a_sighup_ignored_on_purpose_stays_ignored_during_a_run() -> None:
    """``nohup`` (SIGHUP ignored) is kept: inside a run an ignored SIGHUP is not turned into a stop, and SIGTERM at
    its default is; both are as before afterwards."""
    from llm_policy_gen.storage.locks import stops_as_interrupts

    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stops_as_interrupts():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)  # ignored: nothing happens
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_a_process_sent_sigterm_or_sighup_writes_its_summary_and_says_how_to_resume(
        tmp_path: Path, signum: int, code: int) -> None:
    argv = ["train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "500", "--logs-dir",
            str(tmp_path), "--run-id", "r", "--no-plots", "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "llm_policy_gen", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env(tmp_path), text=True)
    run = tmp_path / "CartPole-v1" / "r"
    _when(lambda: (run / "events.jsonl").is_file(), proc)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == code, err
    last = err.strip().splitlines()[-1]
    assert f"interrupted by {signal.Signals(signum).name}: the run directory {run} keeps" in last, err
    assert f"go on with: llm-policy-gen train --resume {run}" in last and "Traceback" not in err, err
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted"
    assert summary["iterations"] == len(read_jsonl(run / "events.jsonl")) >= 1
    assert not (run / HOLDER_FILE).exists()


# ----------------------------------------------------------------------------------------------- item 9
def _limited(limit: int) -> Any:
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return preexec


def _argv(logs: Path, run_id: str) -> list[str]:
    return ["train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "4", "--heldout-episodes", "5",
            "--logs-dir", str(logs), "--run-id", run_id, "--no-plots", "--quiet"]


def _train(logs: Path, run_id: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    argv = _argv(logs, run_id)
    return subprocess.run([sys.executable, "-m", "llm_policy_gen", *argv], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=child_env(logs), preexec_fn=None if limit is None else _limited(limit))


def _without_times(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in ("wall_s", "wall_s_total")} for r in rows]


@pytest.mark.skipif(not hasattr(resource, "RLIMIT_FSIZE"), reason="needs a file size limit")
def test_a_write_refused_by_the_file_size_limit_keeps_the_files_in_step_and_resumes_to_the_same_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the run under the limit is a child process (the limit is set in it); the others run in this one."""
    monkeypatch.setenv("LLM_POLICY_GEN_WORKERS", "1")
    logs = tmp_path / "logs"
    assert main(_argv(logs, "ref")) == 0
    # The limit lets every file of the reference run through but its largest: the checkpoint, which grows with the
    # run's memory, fails part-way through the run, after that iteration's line of events.jsonl was written.
    sizes = {p.name: p.stat().st_size for p in (logs / "CartPole-v1" / "ref").rglob("*") if p.is_file()}
    largest = max(sizes, key=lambda n: sizes[n])
    assert largest == "checkpoint.npz", sizes
    # A margin below its size: the checkpoint holds the run's wall time, whose digits vary by a byte or two per run.
    limit = sizes[largest] - 256
    assert all(size < limit for name, size in sizes.items() if name != largest), sizes
    cut = _train(logs, "cut", limit)
    run = logs / "CartPole-v1" / "cut"
    assert cut.returncode == 1, cut.stderr
    assert "Traceback" not in cut.stderr, cut.stderr
    last = cut.stderr.strip().splitlines()[-1]
    assert f"file size limit (ulimit -f) reached while writing {run / 'checkpoint.npz'}" in last, last
    summary = json.loads((run / "summary.json").read_text())
    kept = summary["iterations"]
    assert 1 <= kept < 4
    assert f"the run directory {run} keeps iterations 1..{kept} (resume with `train --resume {run}`" in last, last
    assert [e["iteration"] for e in read_jsonl(run / "events.jsonl")] == list(range(1, kept + 1))
    assert load_checkpoint(run / "checkpoint.npz")["iteration"] == kept
    assert sorted(p.name for p in (run / "policies").iterdir()) == [f"iter_{i:04d}.json" for i in range(1, kept + 1)]
    assert not list(run.rglob("*.tmp"))
    assert main(["train", "--resume", str(run), "--quiet"]) == 0
    assert comparable(run)[1:] == comparable(logs / "CartPole-v1" / "ref")[1:]
    assert _without_times(read_jsonl(run / "events.jsonl")) == _without_times(
        read_jsonl(logs / "CartPole-v1" / "ref" / "events.jsonl"))


# ----------------------------------------------------------------------------------------------- item 11
@pytest.fixture
def null_server(fake_openai: FakeOpenAIServer) -> FakeOpenAIServer:
    """The fake OpenAI server answering ``content: null`` to every call (as reasoning servers can)."""
    fake_openai.gate = lambda body: ok(None)
    return fake_openai


def test_a_run_whose_answers_were_all_null_ends_with_exit_1_and_says_so(
        tmp_path: Path, null_server: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "CartPole-v1", "--backend", "openai:gpt-4.1-mini", "--iterations", "2",
                 "--candidates", "2", "--train-episodes", "2", "--heldout-episodes", "5", "--logs-dir", str(tmp_path),
                 "--run-id", "r", "--no-plots", "--no-cache"])
    out = capsys.readouterr()
    assert code == 1, out.err
    assert "stop: iterations done" not in out.out and "Traceback" not in out.err
    last = out.err.strip().splitlines()[-1]
    assert last.startswith("llm-policy-gen train: failed: no answer of this run was valid ("), last
    iters = [x for x in out.err.splitlines() if x.startswith("iter ")]
    assert len(iters) == 2 and all("candidates none of 2 valid" in x for x in iters), iters
    assert not any("-/-" in x for x in iters)
    run = tmp_path / "CartPole-v1" / "r"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "failed: no answer was valid"
    calls = read_jsonl(run / "transcripts.jsonl")
    assert calls and not any(c["valid"] for c in calls) and len(null_server.requests) == len(calls)


def test_a_run_with_one_valid_answer_among_null_ones_ends_as_before(
        tmp_path: Path, fake_openai: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    from fakes.tables import TableResponder

    responder = TableResponder()
    calls = {"n": 0}

    def gate(body: Any) -> Any:
        calls["n"] += 1
        return None if calls["n"] == 1 else ok(None)  # the first call answered by the responder, then null

    fake_openai.gate, fake_openai.responder = gate, responder
    code = main(["train", "--env", "CartPole-v1", "--backend", "openai:gpt-4.1-mini", "--iterations", "2",
                 "--candidates", "2", "--train-episodes", "2", "--heldout-episodes", "5", "--logs-dir", str(tmp_path),
                 "--run-id", "r", "--no-plots", "--no-cache"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "stop: iterations done" in out.out
    iters = [x for x in out.err.splitlines() if x.startswith("iter ")]
    assert "/invalid" in iters[0] or "invalid/" in iters[0], iters


# ----------------------------------------------------------------------------------------------- killed mid-write
def test_a_resume_removes_the_temporaries_of_writes_a_kill_cut_short_and_no_other_file(
        offline_run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A process killed between writing an atomic file's temporary and renaming it leaves the temporary (a large
    table's checkpoint: hundreds of MB, as a Hopper-v5 learner's was). Resuming removes those of the run's own files
    and says so; a file of another name stays, and a resume that is refused removes nothing."""
    torn = [offline_run / ".checkpoint.npz.5bl1qofy.tmp", offline_run / "policies" / ".iter_0003.json.a_9z0k1q.tmp"]
    kept = [offline_run / ".notes.txt.abcdefgh.tmp", offline_run / "policies" / ".mine.json.abcdefgh.tmp",
            offline_run / "checkpoint.npz.tmp"]
    for p in torn + kept:
        p.write_bytes(b"\0" * 4096)
    record = (offline_run / "config.json").read_text()
    broken = json.loads(record)
    broken["config"]["backend"] = f"llamacpp:{offline_run.parent / 'gone.gguf'}"
    (offline_run / "config.json").write_text(json.dumps(broken, indent=2))
    refused_resume(offline_run, capsys)  # every file as it was, the temporaries included
    (offline_run / "config.json").write_text(record)
    capsys.readouterr()
    assert main(["train", "--resume", str(offline_run), "--iterations", "3", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert not any(p.exists() for p in torn)
    assert all(p.exists() for p in kept)
    assert ("note: removed 2 temporary files (0.0 MiB) of writes that a killed process left unfinished: "
            ".checkpoint.npz.5bl1qofy.tmp, .iter_0003.json.a_9z0k1q.tmp") in err, err
