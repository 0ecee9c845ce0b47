"""Issue 19, items 5-11 and 15: files that come from elsewhere.

A run directory, a policy file or a comparison folder may have been made by someone else: what it names (hints files,
environment modules, run folders, symbolic links) must not reach outside it, a broken file is one line (exit 2), and
an answer of any size stays bounded in what is stored and resent.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from test_command_line import CORRIDOR  # a user's own environment module, registering LPGCorridor-v0

from llm_policy_gen.cli import main
from llm_policy_gen.commands.compare import CompareConfig, run_compare
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
fake_openai = openai_server.fake_openai


# ---------------------------------------------------------------------------------------------------- helpers
def one_line(err: str) -> str:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def lake_run(tmp_path: Path, run_id: str = "r", iterations: int = 1, quiet: bool = True) -> Path:
    """A finished offline FrozenLake run of ``iterations`` iterations."""
    code = main(["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", str(iterations),
                 "--candidates", "1", "--heldout-episodes", "5", "--logs-dir", str(tmp_path / "logs"), "--run-id",
                 run_id, "--no-plots", "--no-progress", *(["--quiet"] if quiet else [])])
    assert code == 0
    return tmp_path / "logs" / "FrozenLake-v1" / run_id


def resume(run: Path, *extra: str) -> int:
    return main(["train", "--resume", str(run), "--iterations", "2", "--no-progress", "--quiet", *extra])


def edit_json(path: Path, change: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------------------------- item 5: hints files
@pytest.mark.parametrize("hints", ["ABSOLUTE", "../../../../secret.md", "hints/../../secret.md", ".hidden.md"])
def test_a_hints_file_outside_the_prompts_is_refused_on_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               hints: str) -> None:
    secret = tmp_path / "secret.md"
    secret.write_text("TOP-SECRET-HINTS-TEXT\n", encoding="utf-8")
    run = lake_run(tmp_path)
    name = str(secret) if hints == "ABSOLUTE" else hints
    edit_json(run / "config.json", lambda d: d["env_spec"].update(hints=name))
    (run / "summary.json").unlink()  # as if killed: resume continues it
    before = snapshot(run)
    capsys.readouterr()
    assert resume(run) == 2
    line = one_line(capsys.readouterr().err)
    assert "hints" in line and repr(name) in line and "prompts/hints" in line
    assert snapshot(run) == before  # refused before anything was written
    assert "TOP-SECRET" not in (run / "transcripts.jsonl").read_text(encoding="utf-8")


def test_a_shipped_hints_file_still_reaches_the_prompt_on_resume(tmp_path: Path) -> None:
    answers = lake_run(tmp_path / "answers", iterations=2)  # a replay of offline's answers
    assert main(["train", "--env", "FrozenLake-v1", "--backend", f"replay:{answers}", "--iterations", "1",
                 "--candidates", "1", "--heldout-episodes", "5", "--logs-dir", str(tmp_path / "logs"), "--run-id",
                 "r", "--no-plots", "--no-progress", "--quiet"]) == 0
    run = tmp_path / "logs" / "FrozenLake-v1" / "r"
    (run / "summary.json").unlink()
    assert resume(run) == 0
    lines = read_jsonl(run / "transcripts.jsonl")
    hints = ROOT / "llm_policy_gen" / "prompting" / "prompts" / "hints"
    named = json.loads((run / "config.json").read_text(encoding="utf-8"))["env_spec"]["hints"]
    shipped = (hints / named).read_text(encoding="utf-8").strip()
    assert lines[-1]["iteration"] == 2 and shipped.splitlines()[0] in lines[-1]["messages"][-1]["content"]


# ----------------------------------------------------------------------------------------------- item 6: env modules
PLANTED = '''
    from pathlib import Path
    Path(__file__).with_name("PLANTED-RAN").write_text("the planted module ran")
'''


def run_cli(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m llm_policy_gen ARGS`` in ``cwd`` (the current folder is on sys.path there)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "llm_policy_gen", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


def corridor_run(tmp_path: Path, module: str) -> tuple[Path, str]:
    """A finished offline run of the corridor environment as ``module:LPGCorridor-v0`` (module in tmp_path)."""
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(CORRIDOR), encoding="utf-8")
    env_id = f"{module}:LPGCorridor-v0"
    r = run_cli(tmp_path, "train", "--env", env_id, "--backend", "offline", "--iterations", "1", "--candidates", "1",
                "--heldout-episodes", "3", "--logs-dir", "logs", "--run-id", "c", "--no-plots", "--no-progress")
    assert r.returncode == 0, r.stderr
    return tmp_path / "logs" / f"{module}-LPGCorridor-v0" / "c", env_id


def test_evaluate_never_imports_a_module_named_by_a_policy_file(tmp_path: Path) -> None:
    lake = lake_run(tmp_path)
    policy = json.loads((lake / "best_policy.json").read_text(encoding="utf-8"))
    policy["env_id"] = "planted:FrozenLake-v1"
    work = tmp_path / "work"
    work.mkdir()
    (work / "planted.py").write_text(textwrap.dedent(PLANTED), encoding="utf-8")
    (work / "policy.json").write_text(json.dumps(policy), encoding="utf-8")
    r = run_cli(work, "evaluate", "policy.json")
    assert r.returncode == 2
    line = one_line(r.stderr)
    assert "--env planted:FrozenLake-v1" in line and "import" in line
    assert not (work / "PLANTED-RAN").exists()
    r = run_cli(work, "evaluate", "policy.json", "--env", "other:FrozenLake-v1")  # another --env: refused too
    assert r.returncode == 2 and "--env planted:FrozenLake-v1" in one_line(r.stderr)
    assert not (work / "PLANTED-RAN").exists()


def test_a_module_environment_evaluates_and_resumes_only_when_the_command_line_names_it(tmp_path: Path) -> None:
    run, env_id = corridor_run(tmp_path, "lpg_files_corridor")
    r = run_cli(tmp_path, "evaluate", str(run), "--json")
    assert r.returncode == 2 and f"--env {env_id}" in one_line(r.stderr)
    r = run_cli(tmp_path, "evaluate", str(run), "--json", "--env", env_id)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["env_id"] == env_id
    summary = (run / "summary.json").read_bytes()
    for extra in ([], ["--env", "lpg_other:LPGCorridor-v0"], ["--env", "FrozenLake-v1"]):
        r = run_cli(tmp_path, "train", "--resume", str(run), "--iterations", "2", "--no-progress", *extra)
        assert r.returncode == 2 and f"--env {env_id}" in one_line(r.stderr)
        assert (run / "summary.json").read_bytes() == summary
    r = run_cli(tmp_path, "train", "--resume", str(run), "--iterations", "2", "--no-progress", "--env", env_id)
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "summary.json").read_text())["iterations"] == 2


def test_a_config_file_names_a_module_environment_only_with_env_on_the_command_line(tmp_path: Path) -> None:
    run, env_id = corridor_run(tmp_path, "lpg_files_config")
    work = tmp_path / "work"
    work.mkdir()
    (work / "planted.py").write_text(textwrap.dedent(PLANTED), encoding="utf-8")
    (work / "c.toml").write_text('env_id = "planted:FrozenLake-v1"\n', encoding="utf-8")
    args = ["--backend", "offline", "--iterations", "1", "--candidates", "1", "--heldout-episodes", "3",
            "--logs-dir", "logs", "--no-plots", "--no-progress"]
    r = run_cli(work, "train", "--config", "c.toml", *args)
    assert r.returncode == 2 and "add --env planted:FrozenLake-v1" in one_line(r.stderr)
    assert not (work / "PLANTED-RAN").exists() and not (work / "logs").exists()
    r = run_cli(tmp_path, "train", "--config", str(run / "config.json"), *args)  # another run's experiment
    assert r.returncode == 2 and f"add --env {env_id}" in one_line(r.stderr)
    r = run_cli(tmp_path, "train", "--config", str(run / "config.json"), "--env", env_id, *args)
    assert r.returncode == 0, r.stderr


def test_evaluate_takes_env_for_a_shipped_environment_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = lake_run(tmp_path)
    capsys.readouterr()
    assert main(["evaluate", str(run), "--json", "--env", "FrozenLake-v1"]) == 0
    assert json.loads(capsys.readouterr().out)["env_id"] == "FrozenLake-v1"
    assert main(["evaluate", str(run), "--json", "--env", "CartPole-v1"]) == 2
    line = one_line(capsys.readouterr().err)
    assert "FrozenLake-v1" in line and "CartPole-v1" in line


# ----------------------------------------------------------------------------------------------- item 15
def test_a_module_that_cannot_be_imported_is_one_line_and_keeps_the_summary(tmp_path: Path) -> None:
    run, env_id = corridor_run(tmp_path, "lpg_files_gone")
    (tmp_path / "lpg_files_gone.py").unlink()
    shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
    before = snapshot(run)
    r = run_cli(tmp_path, "evaluate", str(run), "--env", env_id)
    assert r.returncode == 2
    assert "cannot import module 'lpg_files_gone'" in one_line(r.stderr)
    r = run_cli(tmp_path, "train", "--resume", str(run), "--iterations", "2", "--env", env_id, "--no-progress")
    assert r.returncode == 2
    assert "cannot import module 'lpg_files_gone'" in one_line(r.stderr)
    assert snapshot(run) == before  # summary.json (and everything else) as it was


def test_a_module_that_fails_while_it_is_imported_is_one_line(tmp_path: Path) -> None:
    run, env_id = corridor_run(tmp_path, "lpg_files_broken")
    (tmp_path / "lpg_files_broken.py").write_text("import gymnasium\nraise RuntimeError('half-edited module')\n",
                                                  encoding="utf-8")
    shutil.rmtree(tmp_path / "__pycache__", ignore_errors=True)
    for args in (["evaluate", str(run), "--env", env_id],
                 ["train", "--resume", str(run), "--iterations", "2", "--env", env_id, "--no-progress"]):
        r = run_cli(tmp_path, *args)
        assert r.returncode == 2
        line = one_line(r.stderr)
        assert "cannot import module 'lpg_files_broken' (RuntimeError: half-edited module)" in line


# ----------------------------------------------------------------------------------------------- item 7: reports
def comparison(tmp_path: Path) -> Path:
    out = tmp_path / "cmp"
    run_compare(CompareConfig("FrozenLake-v1", ["offline"], [0], out, {"iterations": 1, "candidates": 1,
                                                                       "heldout_episodes": 5, "plots": False},
                              progress=False))
    return out


def add_rows(results: Path, run_dirs: list[str]) -> None:
    """Rows like the first one of ``results`` but for other run folders."""
    with open(results, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for k, d in enumerate(run_dirs):
        rows.append({**rows[0], "seed": str(100 + k), "run_dir": d})
    with open(results, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def test_report_run_reports_never_write_outside_the_comparison(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = comparison(tmp_path)
    (run,) = (out / "runs" / "FrozenLake-v1").iterdir()
    outside, absolute = tmp_path / "outside", tmp_path / "elsewhere" / "abs"
    for d in (outside, absolute):
        shutil.copytree(run, d)
    add_rows(out / "results.csv", ["../outside", str(absolute), "runs/../../outside"])
    assert main(["report", str(out), "--run-reports"]) == 0
    assert (run / "report.html").is_file()
    assert not (outside / "report.html").exists() and not (absolute / "report.html").exists()
    printed = capsys.readouterr()
    assert str(outside) not in printed.out and str(absolute) not in printed.out
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "outside/report.html" not in html and f"{absolute}/report.html" not in html


def test_report_neither_reads_nor_writes_through_a_link(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = comparison(tmp_path)
    (run,) = (out / "runs" / "FrozenLake-v1").iterdir()
    elsewhere = tmp_path / "elsewhere.jsonl"
    shutil.move(run / "transcripts.jsonl", elsewhere)
    (run / "transcripts.jsonl").symlink_to(elsewhere)
    assert main(["report", str(run)]) == 2
    assert f"{run / 'transcripts.jsonl'} is a symbolic link" in one_line(capsys.readouterr().err)
    assert main(["report", str(out), "--run-reports"]) == 0  # the comparison's page, without that run's
    assert not (run / "report.html").exists()
    assert "./runs/" not in (out / "report.html").read_text(encoding="utf-8")


def test_a_run_folder_named_like_a_url_is_a_relative_escaped_link(tmp_path: Path) -> None:
    out = comparison(tmp_path)
    (run,) = (out / "runs" / "FrozenLake-v1").iterdir()
    named = out / "javascript:alert(1)"
    shutil.copytree(run, named)
    add_rows(out / "results.csv", ["javascript:alert(1)"])
    assert main(["report", str(out), "--run-reports"]) == 0
    html = (out / "report.html").read_text(encoding="utf-8")
    hrefs = re.findall(r'\shref="([^"]*)"', html)
    assert "./javascript%3Aalert%281%29/report.html" in hrefs
    assert all(h.startswith(("#", "./")) for h in hrefs), hrefs
    assert (named / "report.html").is_file()


def script_hashes(html: str) -> tuple[str, list[str]]:
    csp = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]*)"', html)
    assert csp is not None
    scripts = re.findall(r"<script(?![^>]*\btype=\"application/octet-stream\")[^>]*>(.*?)</script>", html, re.S)
    digests = [base64.b64encode(hashlib.sha256(s.encode("utf-8")).digest()).decode("ascii") for s in scripts]
    return csp.group(1), digests


def test_the_pages_allow_only_their_own_script(tmp_path: Path) -> None:
    out = comparison(tmp_path)
    assert main(["report", str(out), "--run-reports"]) == 0
    (run,) = (out / "runs" / "FrozenLake-v1").iterdir()
    for page in (out / "report.html", run / "report.html"):
        csp, digests = script_hashes(page.read_text(encoding="utf-8"))
        script_src = next(p.strip() for p in csp.split(";") if p.strip().startswith("script-src"))
        assert "unsafe-inline" not in script_src
        assert digests and all(f"'sha256-{d}'" in script_src for d in digests), (script_src, digests)


# ----------------------------------------------------------------------------------------------- item 8: links
def test_a_policies_folder_that_is_a_link_is_refused_and_its_target_untouched(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = lake_run(tmp_path)
    (run / "summary.json").unlink()
    target = tmp_path / "precious"
    target.mkdir()
    (target / "iter_0005.json").write_text("keep me", encoding="utf-8")
    shutil.rmtree(run / "policies")
    (run / "policies").symlink_to(target, target_is_directory=True)
    before = snapshot(run)
    capsys.readouterr()
    assert resume(run) == 2
    line = one_line(capsys.readouterr().err)
    assert "policies" in line and "symbolic link" in line
    assert sorted(p.name for p in target.iterdir()) == ["iter_0005.json"]
    assert (target / "iter_0005.json").read_text(encoding="utf-8") == "keep me"
    assert snapshot(run) == before


@pytest.mark.parametrize("name", ["events.jsonl", "transcripts.jsonl", "training.png", "policies/iter_0001.json",
                                  ".lock", ".lock.holder.json"])
def test_a_file_of_a_run_that_is_a_link_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   name: str) -> None:
    run = lake_run(tmp_path)
    (run / "summary.json").unlink()
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n", encoding="utf-8")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(outside)
    capsys.readouterr()
    assert resume(run) == 2
    line = one_line(capsys.readouterr().err)
    assert name in line and "symbolic link" in line
    assert outside.read_text(encoding="utf-8") == "not yours\n"


def test_the_links_w_and_b_makes_in_its_own_folder_do_not_stop_a_resume(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("wandb")
    assert main(["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "1", "--candidates", "1",
                 "--heldout-episodes", "5", "--logs-dir", str(tmp_path / "logs"), "--run-id", "w2", "--no-plots",
                 "--quiet", "--log", "wandb"]) == 0
    run = tmp_path / "logs" / "FrozenLake-v1" / "w2"
    assert any(p.is_symlink() for p in (run / "wandb").rglob("*"))  # W&B's own latest-run, debug.log, ...
    (run / "summary.json").unlink()
    assert resume(run) == 0
    shutil.rmtree(run / "wandb")
    (tmp_path / "elsewhere").mkdir()
    (run / "wandb").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (run / "summary.json").unlink()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "3", "--quiet"]) == 2
    assert f"{run / 'wandb'} is a symbolic link" in one_line(capsys.readouterr().err)
    assert not any((tmp_path / "elsewhere").iterdir())


# ----------------------------------------------------------------------------------------------- item 9: broken files
def break_line(path: Path, index: int, how: str) -> None:
    data = path.read_bytes().split(b"\n")
    if how == "utf8":
        data[index] = data[index].replace(b'"iteration"', b'"iter\xff\xfeation"', 1)
    elif how == "cut":
        data[index] = data[index][: len(data[index]) // 2]
    elif how == "not-an-object":
        data[index] = b"[1, 2, 3]"
    elif how == "bad-iteration":
        data[index] = data[index].replace(b'"iteration":1', b'"iteration":"one"', 1)
    path.write_bytes(b"\n".join(data))


@pytest.mark.parametrize("name", ["transcripts.jsonl", "events.jsonl"])
@pytest.mark.parametrize("how", ["utf8", "cut", "not-an-object", "bad-iteration"])
def test_a_broken_line_inside_a_jsonl_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       name: str, how: str) -> None:
    run = lake_run(tmp_path, "r", 2)
    break_line(run / name, 0, how)
    before = snapshot(run)
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "3", "--quiet"]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{run / name} line 1" in line
    assert snapshot(run) == before
    assert main(["report", str(run)]) == 2
    assert f"{run / name} line 1" in one_line(capsys.readouterr().err)


def test_a_torn_last_line_is_dropped_with_a_notice_and_the_run_resumes(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    run = lake_run(tmp_path, quiet=False)
    (run / "summary.json").unlink()
    for name in ("events.jsonl", "transcripts.jsonl"):  # what a kill -9 in the middle of a write leaves
        with open(run / name, "ab") as fh:
            fh.write(b'{"iteration":2,"cand')
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "2", "--no-progress"]) == 0
    err = capsys.readouterr().err
    for name in ("events.jsonl", "transcripts.jsonl"):
        assert f"{run / name}: its last line was cut" in err
        assert [r["iteration"] for r in read_jsonl(run / name)] == [1, 2]


def deep_json(depth: int = 100_000) -> str:
    return "[" * depth + "]" * depth


def test_a_deeply_nested_policy_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(deep_json(), encoding="utf-8")
    assert main(["evaluate", str(policy)]) == 2
    line = one_line(capsys.readouterr().err)
    assert str(policy) in line and "nested" in line


@pytest.mark.parametrize("name", ["config.json", "summary.json", "best_policy.json"])
def test_a_deeply_nested_file_of_a_run_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   name: str) -> None:
    run = lake_run(tmp_path)
    (run / name).write_text(deep_json(), encoding="utf-8")
    capsys.readouterr()
    for args in (["train", "--resume", str(run), "--iterations", "2", "--quiet"], ["evaluate", str(run)],
                 ["report", str(run)]):
        if (name, args[0]) in (("summary.json", "evaluate"), ("best_policy.json", "train")):
            continue  # evaluate does not read the summary; a resume writes best_policy.json from its checkpoint
        if (name, args[0]) == ("best_policy.json", "report"):  # the page says why it has no policy figure
            assert main(args) == 0
            assert "nested too deeply" in (run / "report.html").read_text(encoding="utf-8")
            continue
        assert main(args) == 2, args
        line = one_line(capsys.readouterr().err)
        assert str(run / name) in line and "nested" in line


@pytest.mark.parametrize("field", ["candidate_means", "eval_returns", "best_test_mean", "llm_calls"])
def test_a_wrongly_typed_event_field_is_one_line_in_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                               field: str) -> None:
    run = lake_run(tmp_path, "r", 2)
    rows = read_jsonl(run / "events.jsonl")
    rows[1][field] = ["abc"] if field in ("candidate_means", "eval_returns") else "abc"
    (run / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    capsys.readouterr()
    assert main(["report", str(run)]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{run / 'events.jsonl'} line 2" in line and field in line


@pytest.mark.parametrize(("field", "value"), [("input_tokens", "abc"), ("messages", 5), ("latency_s", "slow"),
                                            ("errors", {"a": 1}), ("candidate", "x"), ("messages", [{"role": 1}])])
def test_a_wrongly_typed_transcript_field_is_one_line_in_the_report_and_on_resume(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str], field: str,
                                                                    value: Any) -> None:
    run = lake_run(tmp_path, "r", 2)
    rows = read_jsonl(run / "transcripts.jsonl")
    rows[1][field] = value
    (run / "transcripts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    capsys.readouterr()
    assert main(["report", str(run)]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{run / 'transcripts.jsonl'} line 2: {field} is" in line
    before = snapshot(run)
    assert main(["train", "--resume", str(run), "--iterations", "3", "--quiet"]) == 2  # a resume reads them too
    assert f"{run / 'transcripts.jsonl'} line 2: {field} is" in one_line(capsys.readouterr().err)
    assert snapshot(run) == before


# ----------------------------------------------------------------------------------------------- item 11: run ids
@pytest.mark.parametrize("run_id", ["a\nb", "a\rb", "tab\there", "bell\x07", "...", "..", ".", "....", "a\x7fb"])
def test_a_run_id_with_control_characters_or_only_dots_is_refused(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  run_id: str) -> None:
    code = main(["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "1", "--logs-dir",
                 str(tmp_path), "--run-id", run_id])
    assert code == 2
    line = one_line(capsys.readouterr().err)
    assert "--run-id" in line
    assert not any(p.is_dir() for p in tmp_path.rglob("*"))


# ----------------------------------------------------------------------------------------------- item 10: answer size
@pytest.mark.slow
def test_an_over_long_answer_is_refused_stored_cut_and_never_resent_whole(fake_openai: Any, tmp_path: Path) -> None:
    from fakes.tables import TableResponder

    tables = TableResponder()
    big = json.loads(tables.answer(0))
    big["rationale"] = "x" * (3 * 1024 * 1024)  # a valid answer, but 3 MB of it
    answers = iter([json.dumps(big)])

    def responder(body: dict[str, Any]) -> str:
        return next(answers, None) or tables(body)

    fake_openai.responder = responder
    code = main(["train", "--env", "CartPole-v1", "--backend", "openai:gpt-4.1-mini", "--logs-dir",
                 str(tmp_path / "logs"), "--iterations", "1", "--candidates", "1", "--heldout-episodes", "5",
                 "--no-plots", "--quiet", "--run-id", "big"])
    assert code == 0
    run = tmp_path / "logs" / "CartPole-v1" / "big"
    first, second = read_jsonl(run / "transcripts.jsonl")
    assert not first["valid"] and second["valid"]
    assert len(first["response_text"]) <= 256 * 1024 and first["response_text"].startswith('{"rationale": "xxx')
    assert "over the limit of 262,144 characters" in first["errors"][0] and "3,1" in first["errors"][0]
    assert (run / "transcripts.jsonl").stat().st_size < 1024 * 1024
    repair_request = fake_openai.bodies[1]
    assert len(json.dumps(repair_request)) < 64 * 1024  # the cut answer is quoted in a few KB, not resent whole
    cached = [p.stat().st_size for p in Path(os.environ["XDG_CACHE_HOME"]).rglob("*") if p.is_file()]
    assert cached and max(cached) < 64 * 1024  # the valid answer is cached, the over-long one is not


def test_plot_policy_of_a_module_environment_needs_env_and_draws_with_it(tmp_path: Path) -> None:
    run, env_id = corridor_run(tmp_path, "lpg_files_plot")
    out = tmp_path / "policy.png"
    r = run_cli(tmp_path, "plot", str(run), "--policy", "--out", str(out))
    assert r.returncode == 2 and f"--env {env_id}" in one_line(r.stderr) and not out.exists()
    r = run_cli(tmp_path, "plot", str(run), "--policy", "--out", str(out), "--env", env_id)
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 1000


def test_compare_resumes_its_runs_of_a_module_environment(tmp_path: Path) -> None:
    """compare names its own --env again when it resumes a run, so a module:EnvId run goes on (it was refused)."""
    (tmp_path / "lpg_files_sweep.py").write_text(textwrap.dedent(CORRIDOR), encoding="utf-8")
    env_id = "lpg_files_sweep:LPGCorridor-v0"
    args = ["compare", "--env", env_id, "--backends", "offline", "--seeds", "0", "--iterations", "2", "--out", "cmp"]
    r = run_cli(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    runs = [p.parent for p in (tmp_path / "cmp").rglob("summary.json")]
    assert len(runs) == 1
    (runs[0] / "summary.json").unlink()  # as a run interrupted before its end leaves it
    r = run_cli(tmp_path, *args)
    assert r.returncode == 0, r.stderr
    assert json.loads((runs[0] / "summary.json").read_text())["iterations"] == 2


def test_resume_reads_a_price_file_and_writes_a_cache_folder_only_when_the_command_line_names_them(
        tmp_path: Path) -> None:
    """A run directory from elsewhere names files: its price file is read, and its answer cache folder written to,
    only when the resume names the same (or, for the cache, --no-cache)."""
    prices = tmp_path / "prices.toml"
    prices.write_text('[openai]\n"m" = { input = 1.0, output = 2.0 }\n', encoding="utf-8")
    r = run_cli(tmp_path, "train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "1",
                "--candidates", "1", "--heldout-episodes", "3", "--logs-dir", "logs", "--run-id", "p", "--no-plots",
                "--no-progress", "--prices", str(prices))
    assert r.returncode == 0, r.stderr
    run = tmp_path / "logs" / "FrozenLake-v1" / "p"
    resume = ["train", "--resume", str(run), "--iterations", "2", "--no-progress"]
    r = run_cli(tmp_path, *resume)
    assert r.returncode == 2 and f"add --prices {prices}" in one_line(r.stderr)
    r = run_cli(tmp_path, *resume, "--prices", str(tmp_path / "other.toml"))
    assert r.returncode == 2 and "differs" in one_line(r.stderr)
    r = run_cli(tmp_path, *resume, "--prices", str(prices))
    assert r.returncode == 0, r.stderr

    # an LLM run whose config.json was edited to cache into another folder (refused before any call is made)
    record = json.loads((run / "config.json").read_text())
    elsewhere = tmp_path / "elsewhere"
    record["config"].update(cache_dir=str(elsewhere), prices_file=None, backend="openai:m",
                            base_url="http://127.0.0.1:9/v1")
    (run / "config.json").write_text(json.dumps(record))
    (run / "summary.json").unlink()
    r = run_cli(tmp_path, *resume)
    assert r.returncode == 2 and "add --no-cache" in one_line(r.stderr)
    assert not elsewhere.exists()
