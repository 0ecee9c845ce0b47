"""Issue 19, items 16-26, "What a new user hit": each through the command line or the library API.

Costs of unpriced models, price files checked before anything starts, a deleted checkpoint, a full cache disk, a
reader that goes away, Ctrl-C, resume refusals and versions, replay past its end, direct mode's figures, the
documentation against the output, and smaller things (refused replays, mismatched policies, plots, the comparison
page).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakes import openai_server
from fakes.tables import TableResponder
from test_command_line import child_env, failing, one_line, train_args

from llm_policy_gen.cli import main
from llm_policy_gen.policy import spec_fingerprint
from llm_policy_gen.storage.runlog import read_jsonl

ROOT = Path(__file__).resolve().parents[1]
fake_openai = openai_server.fake_openai
UNPRICED = "gpt-not-in-the-price-table"


def run_files(logs: Path) -> list[Path]:
    return [p for p in logs.rglob("*")] if logs.exists() else []


def llm_train(logs: Path, *extra: str, model: str = UNPRICED) -> list[str]:
    return ["train", "--env", "CartPole-v1", "--backend", f"openai:{model}", "--iterations", "2", "--candidates",
            "1", "--train-episodes", "2", "--heldout-episodes", "5", "--logs-dir", str(logs), "--run-id", "r",
            "--no-plots", *extra]


# ----------------------------------------------------------------------------------------------- item 16
def test_an_unpriced_model_costs_unpriced_on_every_line_and_in_the_summary(
        tmp_path: Path, fake_openai: openai_server.FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    fake_openai.responder = TableResponder()
    assert main(llm_train(tmp_path, "--no-cache")) == 0
    out = capsys.readouterr()
    lines = [x for x in out.err.splitlines() if x.startswith("iter ")]
    assert len(lines) == 2 and all("unpriced" in x and "$" not in x for x in lines), lines
    summary_line = out.out.splitlines()[0]
    assert "unpriced" in summary_line and "$0.0000" not in summary_line, summary_line
    assert json.loads((tmp_path / "CartPole-v1" / "r" / "summary.json").read_text())["cost_complete"] is False


def test_a_priced_model_still_shows_its_cost(
        tmp_path: Path, fake_openai: openai_server.FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    fake_openai.responder = TableResponder()
    assert main(llm_train(tmp_path, "--no-cache", model="gpt-4.1-mini")) == 0
    out = capsys.readouterr()
    assert all("$0.0" in x and "unpriced" not in x for x in out.err.splitlines() if x.startswith("iter "))
    assert "$0.0" in out.out and "unpriced" not in out.out


def _bad_prices(tmp_path: Path, kind: str) -> Path:
    p = tmp_path / f"{kind}.toml"
    if kind == "broken":
        p.write_text("[openai\n")
    elif kind == "no-numbers":
        p.write_text('[openai]\n"gpt-4.1-mini" = { input = "cheap" }\n')
    return p  # "missing": never written


@pytest.mark.parametrize("kind", ["missing", "broken", "no-numbers"])
@pytest.mark.parametrize("backend", ["offline", "openai-cached"])
def test_a_bad_price_file_is_refused_before_a_run_directory_exists(
        tmp_path: Path, fake_openai: openai_server.FakeOpenAIServer, capsys: pytest.CaptureFixture[str], kind: str,
        backend: str) -> None:
    fake_openai.responder = TableResponder()
    logs = tmp_path / "logs"
    if backend == "offline":
        argv = train_args(logs)
    else:  # every answer comes from the cache: the prices are never needed for a call
        assert main(llm_train(tmp_path / "first", model="gpt-4.1-mini")) == 0
        argv = llm_train(logs, model="gpt-4.1-mini")
    capsys.readouterr()
    code = main([*argv, "--prices", str(_bad_prices(tmp_path, kind))])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "price file" in line and kind in line, line
    assert run_files(logs) == []


def test_a_resumed_run_whose_price_file_went_away_is_refused_before_anything_changes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('[offline]\n"*" = { input = 0.0, output = 0.0 }\n')
    assert main([*train_args(tmp_path / "logs", "--no-progress"), "--prices", str(prices)]) == 0
    run = tmp_path / "logs" / "CartPole-v1" / "r"
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    prices.unlink()
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "5"]) == 2
    assert str(prices) in one_line(capsys.readouterr().err)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


# ----------------------------------------------------------------------------------------------- item 17
def test_a_run_whose_checkpoint_was_deleted_keeps_every_recorded_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(train_args(tmp_path, "--iterations", "4", "--no-progress")) == 0
    run = tmp_path / "CartPole-v1" / "r"
    (run / "summary.json").unlink()  # as if killed after iteration 4
    (run / "checkpoint.npz").unlink()
    before = {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert len(read_jsonl(run / "transcripts.jsonl")) == 8
    capsys.readouterr()
    code = main(["train", "--resume", str(run), "--iterations", "6"])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "checkpoint.npz" in line and "4 iterations" in line, line
    assert {p.name: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


# ----------------------------------------------------------------------------------------------- item 18
@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="maps descriptors to files through /proc")
def test_a_full_cache_disk_names_the_cache_and_resume_takes_no_cache(
        tmp_path: Path, fake_openai: openai_server.FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake_openai.responder = TableResponder()
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    restore = failing(monkeypatch, "fsync", "llm-policy-gen/responses", 2)
    code = main(llm_train(tmp_path, "--iterations", "3", model="gpt-4.1-mini"))
    restore()
    run = tmp_path / "CartPole-v1" / "r"
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and "Traceback" not in "\n".join(err)
    folder = cache / "llm-policy-gen" / "responses"
    assert f"disk full while writing the answer cache {folder}" in err[-1], err[-1]
    assert "the run directory" not in err[-1].split(";")[0]
    assert f"train --resume {run} --no-cache" in err[-1], err[-1]
    assert main(["train", "--resume", str(run), "--no-cache"]) == 0
    assert [e["iteration"] for e in read_jsonl(run / "events.jsonl")] == [1, 2, 3]


# ----------------------------------------------------------------------------------------------- item 19
def _closed_pipes(argv: list[str], tmp: Path, close_stderr: bool = False) -> subprocess.Popen[bytes]:
    """``llm-policy-gen ARGV`` whose reader went away before it wrote anything (``| head`` that already exited)."""
    proc = subprocess.Popen([sys.executable, "-m", "llm_policy_gen", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env(tmp))
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    if close_stderr:
        proc.stderr.close()
    return proc


@pytest.mark.parametrize("argv", [["envs"], ["backends"], ["evaluate", "RUN", "--json", "--episodes", "3"]])
def test_a_listing_whose_reader_is_gone_exits_quietly(tmp_path: Path, argv: list[str]) -> None:
    if "RUN" in argv:
        assert main(train_args(tmp_path, "--no-progress")) == 0
        argv = [str(tmp_path / "CartPole-v1" / "r") if a == "RUN" else a for a in argv]
    proc = _closed_pipes(argv, tmp_path)
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.wait(timeout=120)
    assert err == "" and proc.returncode == 141, (proc.returncode, err)


def test_a_run_whose_reader_is_gone_runs_to_its_end(tmp_path: Path) -> None:
    assert main(train_args(tmp_path, "--no-progress")) == 0
    run = tmp_path / "CartPole-v1" / "r"
    proc = _closed_pipes(["train", "--resume", str(run), "--iterations", "6", "--no-plots"], tmp_path,
                         close_stderr=True)
    assert proc.wait(timeout=300) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "iterations done" and summary["iterations"] == 6
    assert [e["iteration"] for e in read_jsonl(run / "events.jsonl")] == [1, 2, 3, 4, 5, 6]


# ----------------------------------------------------------------------------------------------- item 20
def test_ctrl_c_names_the_run_directory_and_the_resume_command(tmp_path: Path) -> None:
    argv = ["train", "--env", "CartPole-v1", "--backend", "offline", "--iterations", "500", "--logs-dir",
            str(tmp_path), "--no-plots", "--no-progress"]  # an automatic run id
    proc = subprocess.Popen([sys.executable, "-m", "llm_policy_gen", *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=child_env(tmp_path), text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(tmp_path.glob("CartPole-v1/*/events.jsonl")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    run = next(tmp_path.glob("CartPole-v1/*"))
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert str(run) in last and f"llm-policy-gen train --resume {run}" in last and "Traceback" not in err, err


# ----------------------------------------------------------------------------------------------- item 21
@pytest.mark.parametrize(("extra", "option"), [
    (["--seed", "3"], "--seed"),
    (["--mode", "direct"], "--mode"),
    (["--candidates", "3"], "--candidates"),
    (["--timeout", "5", "--temperature", "0.5"], "--temperature"),  # --prices: test_foreign_files (same file)
])
def test_resume_refusals_name_the_options(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                                          option: str) -> None:
    assert main(train_args(tmp_path, "--no-progress")) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(tmp_path / "CartPole-v1" / "r"), *extra]) == 2
    line = one_line(capsys.readouterr().err)
    assert f"{option} cannot change" in line and "accepted with --resume: --iterations, " in line, line
    assert "_" not in line.split("accepted with --resume:")[1], line
    assert "--no-cache" in line and "--no-plots" in line


def test_a_run_from_another_version_resumes_with_one_note(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from llm_policy_gen import __version__

    assert main(train_args(tmp_path, "--no-progress")) == 0
    run = tmp_path / "CartPole-v1" / "r"
    record = json.loads((run / "config.json").read_text())
    record["version"] = "0.0.1"
    (run / "config.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "--iterations", "4", "--no-progress"]) == 0
    notes = [x for x in capsys.readouterr().err.splitlines() if "0.0.1" in x]
    assert len(notes) == 1 and __version__ in notes[0], notes


# ----------------------------------------------------------------------------------------------- item 22
def test_a_replay_past_its_end_sums_the_episodes_of_its_events(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(train_args(tmp_path, "--no-progress")) == 0
    recorded = tmp_path / "CartPole-v1" / "r" / "transcripts.jsonl"
    code = main(["train", "--backend", f"replay:{recorded}", "--iterations", "6", "--candidates", "2",
                 "--heldout-episodes", "5", "--logs-dir", str(tmp_path / "again"), "--run-id", "r", "--no-plots",
                 "--no-progress"])
    assert code == 0
    run = tmp_path / "again" / "CartPole-v1" / "r"
    summary = json.loads((run / "summary.json").read_text())
    events = read_jsonl(run / "events.jsonl")
    assert summary["iterations"] == events[-1]["iteration"] == 3
    assert summary["episodes_total"] == events[-1]["episodes_total"]
    assert summary["env_steps_total"] == events[-1]["env_steps_total"]


# ----------------------------------------------------------------------------------------------- item 24
def test_direct_mode_says_when_its_held_out_mean_is_measured_and_which_iteration_was_best(
        tmp_path: Path, fake_openai: openai_server.FakeOpenAIServer, capsys: pytest.CaptureFixture[str]) -> None:
    fake_openai.responder = lambda body: "Action: 1"
    assert main([*llm_train(tmp_path, "--mode", "direct", "--iterations", "3", model="gpt-4.1-mini")]) == 0
    out = capsys.readouterr()
    run = tmp_path / "CartPole-v1" / "r"
    events = read_jsonl(run / "events.jsonl")
    summary = json.loads((run / "summary.json").read_text())
    adopted = [e["iteration"] for e in events if e["accepted"]]
    assert adopted[-1] != events[-1]["iteration"]  # the last batch was not the best one
    assert summary["best_iteration"] == adopted[-1]
    assert json.loads((run / "best_policy.json").read_text())["meta"]["heldout_mean"] == summary["best_eval_mean"]
    lines = [x for x in out.err.splitlines() if x.startswith("iter ")]
    assert len(lines) == 3 and all("held-out at the end" in x for x in lines), lines
    assert all(e["best_eval_mean"] is None and e["heldout_at_end"] is True for e in events)
    assert f"held-out mean {summary['best_eval_mean']:.2f} over 5 episodes (measured once, at the end)" in out.out


# ----------------------------------------------------------------------------------------------- item 26
def test_best_policy_keeps_its_adoption_test_mean_after_a_resume(tmp_path: Path) -> None:
    assert main(train_args(tmp_path, "--no-progress")) == 0
    run = tmp_path / "CartPole-v1" / "r"
    meta = json.loads((run / "best_policy.json").read_text())["meta"]
    adopted = next(e for e in read_jsonl(run / "events.jsonl") if e["iteration"] == meta["iteration"])
    assert adopted["accepted"] and meta["eval_mean"] == adopted["eval_mean"]
    (run / "summary.json").unlink()  # as if killed after its last iteration: the resume has nothing left to run
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert json.loads((run / "best_policy.json").read_text())["meta"]["eval_mean"] == adopted["eval_mean"]


def test_a_refused_replay_leaves_no_folder_behind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(train_args(tmp_path / "made", "--no-progress")) == 0
    recorded = tmp_path / "made" / "CartPole-v1" / "r" / "transcripts.jsonl"
    logs = tmp_path / "logs"
    capsys.readouterr()
    code = main(["train", "--env", "FrozenLake-v1", "--backend", f"replay:{recorded}", "--logs-dir", str(logs)])
    assert code == 2 and "recorded with env_id 'CartPole-v1'" in one_line(capsys.readouterr().err)
    assert run_files(logs) == []


def _edited_policy(tmp_path: Path, edit: str) -> Path:
    assert main(train_args(tmp_path, "--no-progress")) == 0
    run = tmp_path / "CartPole-v1" / "r"
    data = json.loads((run / "best_policy.json").read_text())
    if edit == "bins":  # a policy written for other bins (its fingerprint is theirs)
        data["observation"]["dims"][0]["high"] = 9.0
        data["spec_fingerprint"] = spec_fingerprint(data["env_id"], data["env_kwargs"], data["observation"],
                                                    data["action"])
    else:
        data["spec_fingerprint"] = "0" * 16
    (run / "best_policy.json").write_text(json.dumps(data))
    return run


@pytest.mark.parametrize("command", [["evaluate"], ["plot", "--policy", "--out", "OUT"]])
@pytest.mark.parametrize(("edit", "said"), [("bins", "observation bins differ"), ("fingerprint", "spec_fingerprint")])
def test_plot_and_evaluate_refuse_the_same_mismatched_policies(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str], edit: str, said: str) -> None:
    run = _edited_policy(tmp_path, edit)
    out = tmp_path / "policy.png"
    capsys.readouterr()
    code = main([*(str(out) if a == "OUT" else a for a in command), str(run)])
    assert code == 2 and said in one_line(capsys.readouterr().err)
    assert not out.exists()


# ----------------------------------------------------------------------------------------------- item 25
def test_compare_makes_the_run_folders_its_documentation_names(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    code = main(["compare", "--env", "FrozenLake-v1", "--backends", "offline,offline@reward", "--seeds", "0",
                 "--iterations", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    made = sorted(p.name for p in (out / "runs" / "FrozenLake-v1").iterdir())
    assert made == ["offline-reward_s0", "offline_s0"]
    docs = (ROOT / "docs" / "modes.md").read_text()
    assert all(f"`{name}`" in docs for name in made) and "<backend>-<mode>_s<seed>" not in docs
    results = (out / "results.md").read_text()
    assert "(1 run per backend), 1 iteration per run" in results


def test_envs_shows_the_format_column_the_documentation_shows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[-1] == "format"
    rows = {x.split()[0]: x for x in lines[1:]}
    assert rows["CartPole-v1"].endswith("table (auto)") and rows["MountainCar-v0"].endswith("rules")
    assert main(["envs", "--json"]) == 0
    listed = {r["env_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert listed["FrozenLake-v1.8x8"]["format"] == "table"
    docs = (ROOT / "docs" / "environments.md").read_text()
    assert "| CartPole-v1 | 324 |" in docs and "| table (auto) |" in docs


def test_a_task_without_a_threshold_says_so_in_a_singular_summary(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--env", "CliffWalking-v1", "--backend", "offline", "--iterations", "1", "--candidates",
                 "1", "--heldout-episodes", "1", "--logs-dir", str(tmp_path), "--no-plots", "--quiet"])
    assert code == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert "no threshold" in line and "not solved" not in line, line
    assert "over 1 episode " in line and "; 1 iteration, " in line and "1 proposal (no model called)" in line


@pytest.mark.parametrize(("spec", "tail"), [("opnai", "random)"), ("opnai:gpt-4.1", "the spec was 'opnai:gpt-4.1'")])
def test_an_unknown_backend_is_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str,
                                          tail: str) -> None:
    assert main(["train", "--backend", spec, "--logs-dir", str(tmp_path)]) == 2
    line = one_line(capsys.readouterr().err)
    assert "unknown backend 'opnai' for --backend; did you mean openai?" in line and line.endswith(tail), line
    assert "in 'opnai'" not in line


@pytest.mark.parametrize(("text", "said"), [('log = ["cvs"]', "unknown logger 'cvs' in config file {} (key log)"),
                                            ('[train]\nmode = "tabel"', "unknown mode 'tabel' in config file {} (key "
                                                                        "mode); did you mean table?")])
def test_a_config_file_error_names_the_file_and_its_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        text: str, said: str) -> None:
    config = tmp_path / "run.toml"
    config.write_text(text + "\n")
    assert main(["train", "--config", str(config), "--backend", "offline", "--logs-dir", str(tmp_path / "l")]) == 2
    line = one_line(capsys.readouterr().err)
    assert said.format(config) in line and "for --" not in line, line
    assert run_files(tmp_path / "l") == []


def test_a_missing_extra_gives_the_readme_install_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "imageio", None)
    monkeypatch.setitem(sys.modules, "imageio.v3", None)
    assert main(train_args(tmp_path, "--no-progress")) == 0
    capsys.readouterr()
    code = main(["evaluate", str(tmp_path / "CartPole-v1" / "r"), "--episodes", "1", "--gif",
                 str(tmp_path / "a.gif")])
    assert code == 2 and "pip install -e '.[gif]'" in one_line(capsys.readouterr().err)


def test_hoppers_policy_drawing_has_apart_titles_and_a_legend_of_its_27_actions(tmp_path: Path) -> None:
    pytest.importorskip("mujoco")
    from llm_policy_gen.plotting.table_figure import policy_figure
    from llm_policy_gen.run.files import load_run_policy

    code = main(["train", "--env", "Hopper-v5", "--backend", "offline", "--iterations", "1", "--candidates", "1",
                 "--heldout-episodes", "1", "--logs-dir", str(tmp_path), "--run-id", "h", "--no-plots", "--quiet"])
    assert code == 0
    fig = policy_figure(*load_run_policy(tmp_path / "Hopper-v5" / "h"))
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert len(fig.axes) == 16 and len(panels) == 16  # no colour bar axes
    boxes = [ax.title.get_window_extent(renderer) for ax in panels]
    assert not [(a, b) for a in range(16) for b in range(a + 1, 16) if boxes[a].overlaps(boxes[b])]
    (legend,) = fig.legends
    labels = [t.get_text() for t in legend.get_texts()]
    assert len(labels) == 27 and labels[13] == "13: thigh torque=0, leg torque=0, foot torque=0"
    colours = {tuple(h.get_facecolor()) for h in legend.legend_handles}
    assert len(colours) == 27


def test_the_comparison_pages_runs_table_fits_a_1200_pixel_window(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from test_report import browse, chromium

    chromium()
    assert main(["train", "--env", "FrozenLake-v1", "--backend", "offline", "--iterations", "3", "--logs-dir",
                 str(tmp_path / "made"), "--run-id", "r", "--no-plots", "--quiet"]) == 0
    deep = tmp_path / "a-rather-long-folder-name-for-recorded-transcripts" / "run_with_a_long_identifier_0001"
    deep.mkdir(parents=True)
    (deep / "transcripts.jsonl").write_bytes((tmp_path / "made" / "FrozenLake-v1" / "r" / "transcripts.jsonl")
                                             .read_bytes())
    out = tmp_path / "cmp"
    assert main(["compare", "--env", "FrozenLake-v1", "--backends", f"offline,replay:{deep / 'transcripts.jsonl'}",
                 "--seeds", "0-1", "--iterations", "5", "--out", str(out)]) == 0
    assert main(["report", str(out)]) == 0
    page = out / "report.html"
    # The same page with one more script, which measures the runs table against the box that holds it.
    html = page.read_text()
    html = html.replace('<meta http-equiv="Content-Security-Policy"', '<meta name="csp-removed-for-the-test"')
    probe = ("<script>const t = document.querySelector('table.runs');"
             "document.body.setAttribute('data-fit', String(t.scrollWidth <= t.parentElement.clientWidth));</script>")
    measured = tmp_path / "measured.html"
    measured.write_text(html.replace("</body>", probe + "</body>"))
    dom = browse(measured, tmp_path, "--dump-dom", "--window-size=1200,1400").stdout
    assert 'data-fit="true"' in dom, re.findall(r"data-fit=\"\w+\"", dom)


def test_a_long_backend_name_is_shortened_in_the_comparisons_figures(tmp_path: Path) -> None:
    import matplotlib

    from llm_policy_gen.sweep.figures import plot_curves
    from llm_policy_gen.sweep.results import Curve

    long = "replay:/data/" + "a-rather-long-folder-name/" * 4 + "run_0001/transcripts.jsonl"
    curves = [Curve(b, 0, [0.0, 50.0, 100.0], [0.0, 0.5, 1.0]) for b in ("offline", long)]
    with matplotlib.rc_context({"svg.fonttype": "none"}):  # the labels as text in the SVG
        svg = plot_curves(curves, tmp_path / "curves.svg", "FrozenLake-v1").read_text()
    assert "replay:run_0001 (median of 1)" in svg  # the method's short name: its run's folder (sweep/methods.py)
    assert long not in svg and "offline (median of 1)" in svg
