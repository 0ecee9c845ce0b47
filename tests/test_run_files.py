"""The run directory has one owner (issue 30, item 1): ``run/files.py`` names every file of it, ``config.json``
carries the layout's ``schema_version`` that readers check, a directory of today's layout (no ``schema_version``)
still evaluates, resumes and reports, and a new run's directory is never seen without its whole ``config.json``,
so one stopped before its first iteration resumes."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.run import files
from llm_policy_gen.run.files import RUN_FILE_NAMES, SCHEMA_KEY, SCHEMA_VERSION, RunDir
from llm_policy_gen.run.schema import EVENT_FIELDS, Event
from llm_policy_gen.storage.locks import LOCK_FILES

PKG = Path(__file__).resolve().parents[1] / "llm_policy_gen"
OWNER = PKG / "run" / "files.py"
#: (module, name): a string that is the same name as a run's file but names something else.
NOT_A_RUN_FILE = {("lm/backbone.py", "config.json"): "a Hugging Face model folder's configuration",
                  ("lm/custom_code.py", "config.json"): "a Hugging Face model folder's configuration",
                  ("lm/model_files.py", "config.json"): "a Hugging Face model folder's configuration (its width)",
                  ("suites/store.py", ".lock"): "the suffix of a suite's records store's own lock",
                  ("storage/locks.py", ".lock"): "the folder lock's file, which the lock writes and run/files.py lists",
                  ("storage/locks.py", ".lock.holder.json"): "the lock holder's note, written and read by the lock"}


def _strings(tree: ast.AST) -> list[tuple[int, str]]:
    """The string constants of a module that are not docstrings (nor other bare string statements), f-string
    pieces included."""
    bare = {id(node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in bare]


def _names_in(text: str) -> set[str]:
    """The run-directory names ``text`` holds as a path: the whole string, or a part between slashes."""
    return {part for part in {text, *text.split("/")} if part in RUN_FILE_NAMES}


def test_no_module_but_run_files_names_a_file_of_the_run_directory() -> None:
    assert {"config.json", "events.jsonl", "summary.json", "checkpoint.npz", "policies"} <= set(RUN_FILE_NAMES)
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            for name in _names_in(text):
                if path != OWNER and (rel, name) not in NOT_A_RUN_FILE:
                    found.append(f"{rel}:{line}: {text!r}")
    assert found == []
    # the scan sees what it looks for: the owner's own names, an f-string's piece, and not a docstring
    owner = {name for _, text in _strings(ast.parse(OWNER.read_text(encoding="utf-8"))) for name in _names_in(text)}
    assert owner | set(LOCK_FILES) == set(RUN_FILE_NAMES)  # the lock's two files are named by the lock
    probe = ast.parse('"""events.jsonl"""\nx = f"policies/iter_{k}.json"\ny = "a config.json, in prose"\n')
    assert [t for _, t in _strings(probe) if _names_in(t)] == ["policies/iter_"]


#: The bench scripts that still read run directories by name: issue 61 ("one benchmark engine") replaces them with
#: suites the product's sweep runs; this list may only shrink.
BENCH_NOT_YET_THROUGH_THE_READER: set[str] = set()


def test_no_tool_or_bench_script_names_a_file_of_the_run_directory() -> None:
    root = PKG.parent
    found = []
    for path in sorted([*(root / "tools").glob("*.py"), *(root / "bench").glob("*.py")]):
        if path.parent.name == "bench" and path.name in BENCH_NOT_YET_THROUGH_THE_READER:
            continue
        for line, text in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            found += [f"{path.relative_to(root)}:{line}: {text!r}" for name in _names_in(text)
                      if (path.relative_to(root).as_posix(), name) not in NOT_A_RUN_FILE]
    assert found == []
    still = {p.name for p in (root / "bench").glob("*.py")
             if any((f"bench/{p.name}", n) not in NOT_A_RUN_FILE
                    for _, t in _strings(ast.parse(p.read_text(encoding="utf-8"))) for n in _names_in(t))}
    assert still == BENCH_NOT_YET_THROUGH_THE_READER  # one that now reads through the reader leaves the list


def test_the_event_checks_come_from_the_typed_event() -> None:
    assert set(EVENT_FIELDS) <= set(Event.__annotations__)
    assert {"test_mean", "episodes_total", "candidate_means", "validation_errors", "accepted"} <= set(EVENT_FIELDS)


def _train(logs: Path, *extra: str) -> Path:
    argv = ["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "2", "--heldout-episodes", "10",
            "--logs-dir", str(logs), "--run-id", "r", "--no-progress", "--no-plots", "--no-cache", *extra]
    assert main(argv) == 0
    return logs / "FrozenLake-v1" / "r"


def _snapshot(run: Path) -> dict[str, bytes]:
    return {p.relative_to(run).as_posix(): p.read_bytes() for p in sorted(run.rglob("*")) if p.is_file()}


def _config(run: Path) -> dict[str, Any]:
    record = json.loads(RunDir(run).config.read_text(encoding="utf-8"))
    assert isinstance(record, dict)
    return record


def test_a_newer_layout_is_refused_in_one_line_by_every_reader(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = _train(tmp_path / "logs")
    record = _config(run)
    assert record[SCHEMA_KEY] == SCHEMA_VERSION
    record[SCHEMA_KEY] = SCHEMA_VERSION + 1
    RunDir(run).config.write_text(json.dumps(record), encoding="utf-8")
    before = _snapshot(run)
    capsys.readouterr()
    for argv in (["evaluate", str(run), "--episodes", "2"], ["train", "--resume", str(run), "--iterations", "3"],
                 ["report", str(run), "--out", str(tmp_path / "page.html")],
                 ["train", "--config", str(RunDir(run).config), "--logs-dir", str(tmp_path / "other")]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{SCHEMA_KEY} {SCHEMA_VERSION + 1}" in err, (argv, err)
        assert "upgrade llm-policy-gen" in err
    assert _snapshot(run) == before
    assert not (tmp_path / "page.html").exists() and not (tmp_path / "other").exists()


def test_a_run_directory_of_the_layout_before_schema_version_evaluates_resumes_and_reports(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _train(tmp_path / "logs")
    record = _config(run)
    del record[SCHEMA_KEY]  # the layout today's main writes: the same files, no schema_version
    RunDir(run).config.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    summary = json.loads(RunDir(run).summary.read_text(encoding="utf-8"))
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["mean"] == pytest.approx(summary["best_eval_mean"]) and measured["episodes"] == 10
    assert main(["report", str(run), "--out", str(tmp_path / "page.html")]) == 0
    assert "FrozenLake-v1" in (tmp_path / "page.html").read_text(encoding="utf-8")
    assert main(["train", "--resume", str(run), "--iterations", "3", "--no-progress", "--no-plots"]) == 0
    events = RunDir(run).load_events()
    assert [e["iteration"] for e in events] == [1, 2, 3]
    assert sorted(RunDir(run).iteration_policies()) == [1, 2, 3]


def test_a_run_directory_is_never_seen_without_its_whole_config(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from llm_policy_gen.run import parts

    logs = tmp_path / "logs"
    seen: list[list[str]] = []
    real = parts.make_backend

    def watching(*args: Any, **kwargs: Any) -> Any:  # the run is being built: what can others see?
        seen.append(sorted(p.name for p in (logs / "FrozenLake-v1").iterdir() if not p.name.startswith(".")))
        return real(*args, **kwargs)

    monkeypatch.setattr(parts, "make_backend", watching)
    run = _train(logs)
    assert seen == [[]]
    assert sorted(p.name for p in run.parent.iterdir()) == ["r"]  # no staging folder left behind
    record = _config(run)
    assert {"config", "env_spec", "backend", "seeds", SCHEMA_KEY} <= set(record)


def test_a_run_stopped_before_its_first_iteration_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from llm_policy_gen.run.services import Run

    real = Run.mode_start
    calls = []

    def stopped_once(self: Run) -> None:
        calls.append(1)
        if len(calls) == 1:  # Ctrl-C (or a kill) as the run starts: before its initial table is scored
            raise KeyboardInterrupt
        real(self)

    monkeypatch.setattr(Run, "mode_start", stopped_once)
    logs = tmp_path / "logs"
    argv = ["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "2", "--heldout-episodes", "10",
            "--logs-dir", str(logs), "--run-id", "r", "--no-progress", "--no-plots", "--no-cache"]
    assert main(argv) == 130
    assert "--resume" in capsys.readouterr().err
    run = logs / "FrozenLake-v1" / "r"
    rd = RunDir(run)
    assert not rd.events.exists() and not rd.checkpoint.exists()
    assert {"backend", "seeds", SCHEMA_KEY} <= set(_config(run))  # the whole record, written once
    assert main(["train", "--resume", str(run), "--no-progress", "--no-plots"]) == 0
    assert [e["iteration"] for e in rd.load_events()] == [1, 2]
    assert rd.load_summary() is not None


def test_prune_after_keeps_the_policy_files_up_to_the_checkpoint(tmp_path: Path) -> None:
    rd = RunDir(tmp_path)
    rd.policies.mkdir()
    for k in (1, 2, 3, 12):
        rd.policy_file(k).write_text("{}")
    (rd.policies / "notes.txt").write_text("kept")
    rd.prune_after(2)
    assert sorted(rd.iteration_policies()) == [1, 2]
    assert (rd.policies / "notes.txt").exists()
    assert files.config_of({"config": {}}, "x") == {"config": {}, "schema_version": 2}  # layout 1, upgraded
