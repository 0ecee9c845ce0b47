"""A comparison's method entries (issue 59 item 10, issue 60 item 2): the grammar of ``compare --methods``, run ids
that old comparison folders keep, display names from a label or a path's stem, per-method options (one that does not
apply refused before anything runs), and runs whose calls all came from the answer cache kept out of time figures."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from fakes import openai_server
from fakes.tables import TableResponder

from llm_policy_gen.cli import main
from llm_policy_gen.errors import UserError
from llm_policy_gen.sweep.markdown import results_markdown
from llm_policy_gen.sweep.methods import display_names, parse_method, parse_methods, path_stem, split_methods
from llm_policy_gen.sweep.plan import plan
from llm_policy_gen.sweep.results import ResultRow, SweepRecord, backend_stats, read_results
from llm_policy_gen.sweep.task import RunTask

fake_openai = openai_server.fake_openai
SMOL = "/root/.cache/llm-policy-gen/models/SmolLM2-135M-Instruct.Q4_1.gguf"


# ---------------------------------------------------------------------------------------------------- the grammar
@pytest.mark.parametrize(("entry", "label", "backend", "mode", "options"), [
    ("offline", None, "offline", None, {}),
    ("offline@reward", None, "offline", "reward", {}),
    ("@q-learning", None, None, "q-learning", {}),
    ("onehot=@lm-policy[lm_features=onehot]", "onehot", None, "lm-policy", {"lm_features": "onehot"}),
    (f"smol=llamacpp:{SMOL}", "smol", f"llamacpp:{SMOL}", None, {}),
    ("@lm-policy[lm_model=/m/Qwen.gguf;lm-head=scores]", None, None, "lm-policy",
     {"lm_model": "/m/Qwen.gguf", "lm_head": "scores"}),
    ("wide=@lm-policy[lm_net_arch=64,64;lm_n_steps=128]", "wide", None, "lm-policy",
     {"lm_net_arch": [64, 64], "lm_n_steps": 128}),
    ("a.b+c-1=offline@advisor[advisor_prob=0.25]", "a.b+c-1", "offline", "advisor", {"advisor_prob": 0.25}),
])
def test_good_entries_parse(entry: str, label: str | None, backend: str | None, mode: str | None,
                            options: dict[str, Any]) -> None:
    m = parse_method(entry)
    assert (m.label, m.backend, m.mode, m.options) == (label, backend, mode, options)


def test_entries_split_on_top_level_commas_only() -> None:
    assert split_methods("offline, w=@lm-policy[lm_net_arch=64,64;lm_n_steps=128] ,random,") == [
        "offline", "w=@lm-policy[lm_net_arch=64,64;lm_n_steps=128]", "random"]
    assert [m.written for m in parse_methods("offline,@lm-policy[lm_net_arch=32,32],offline")] == [
        "offline", "@lm-policy[lm_net_arch=32,32]"]


@pytest.mark.parametrize(("text", "message"), [
    ("@table", "@table alone names no backend"),
    ("bad label=offline", "label 'bad label' is not made of"),
    ("offline[lm_n_steps=128", "options go in one [...] at the end"),
    ("offline[]", "empty [...]"),
    ("offline[lm_n_steps]", "is not KEY=VALUE"),
    ("@lm-policy[lm_n_steps=many]", "bad lm_n_steps='many'"),
    ("@lm-policy[lm_n_steps=1]", "bad lm_n_steps = 1: accepted an integer >= 2"),
    ("offline[no_such=1]", "unknown setting 'no_such'"),
    ("offline[seed=3]", "seed is not an option of one method (it is set by --seeds)"),
    ("offline@nomode", "unknown mode 'nomode'"),
    ("nope", "unknown backend 'nope'"),
    ("a=offline,a=random", "its runs would go where those of 'a=offline' go"),
    ("offline,offline=random", "its runs would go where those of 'offline' go"),
    ("openai:m[base_url=https://user:hunter2@h.example/v1]", "it holds a secret"),
])
def test_bad_entries_are_one_line_user_errors(text: str, message: str) -> None:
    with pytest.raises(UserError, match=None) as err:
        parse_methods(text)
    assert message in str(err.value) and "\n" not in str(err.value) and "hunter2" not in str(err.value)


# ---------------------------------------------------------------------------------------------------- run ids
@pytest.mark.parametrize(("entry", "run_id"), [  # the ids compare gave before the grammar: slug(entry)_s{seed}
    ("offline", "offline_s0"),
    ("q-learning", "q-learning_s0"),
    ("random", "random_s0"),
    ("offline@reward", "offline-reward_s0"),
    ("kept-table-q@advisor", "kept-table-q-advisor_s0"),
    ("offline@lm-policy", "offline-lm-policy_s0"),
    ("gemini:gemini-2.5-flash", "gemini-gemini-2.5-flash_s0"),
    ("openai:gpt-4.1-mini@direct", "openai-gpt-4.1-mini-direct_s0"),
    ("llamacpp:/a/b/M.gguf", "llamacpp-a-b-M.gguf_s0"),
    (f"llamacpp:{SMOL}", "llamacpp-root-.cache-llm-policy-gen-models-SmolLM2-135M-Instruct.Q4_1.gguf_s0"),
    ("@q-learning", "q-learning_s0"),
    ("@lm-policy", "lm-policy_s0"),
    ("smol=llamacpp:/a/b/M.gguf", "smol_s0"),
])
def test_run_ids_of_old_entries_are_unchanged(entry: str, run_id: str, tmp_path: Path) -> None:
    assert RunTask("CartPole-v1", entry, 0, str(tmp_path)).run_id == run_id


def test_options_without_a_label_give_a_hashed_id_that_ignores_their_spelling(tmp_path: Path) -> None:
    a = parse_method("@lm-policy[lm_features=onehot;lm_n_steps=128]").run_id(2)
    b = parse_method("@lm-policy[lm-n-steps=128;lm-features=onehot]").run_id(2)
    assert a == b and a.startswith("lm-policy-") and a.endswith("_s2") and len(a) == len("lm-policy-12345678_s2")
    assert parse_method("@lm-policy[lm_features=random]").run_id(2) != a


def test_a_mode_alone_runs_what_its_old_spelling_runs(tmp_path: Path) -> None:
    def config(entry: str) -> dict[str, Any]:
        return {k: v for k, v in RunTask("CartPole-v1", entry, 0, str(tmp_path)).config().to_dict().items()
                if k != "run_id"}

    assert config("@q-learning") == config("q-learning")
    assert config("@lm-policy") == config("offline@lm-policy")


def test_the_old_compare_fixture_keeps_its_ids() -> None:
    runs = Path(__file__).parent / "data" / "rundirs_v1" / "compare" / "runs" / "FrozenLake-v1"
    record = json.loads((runs.parents[1] / "compare.json").read_text())
    ids = {RunTask("FrozenLake-v1", b, s, "/x").run_id for b in record["backends"] for s in record["seeds"]}
    assert ids == {p.name for p in runs.iterdir()}


# ---------------------------------------------------------------------------------------------------- names
def test_display_names_are_labels_or_short_names() -> None:
    methods = parse_methods(f"llamacpp:{SMOL},replay:/x/run_0001/transcripts.jsonl,offline@lm-policy,"
                            "tuned=offline@reward,@lm-policy[lm_model=/m/Qwen2-0.5B;lm_head=scores],"
                            "@lm-policy[lm_features=onehot]")
    names = display_names(methods, {"lm_model": SMOL})
    assert list(names.values()) == [
        "llamacpp:SmolLM2-135M-Instruct.Q4_1", "replay:run_0001", "lm-policy(SmolLM2-135M-Instruct.Q4_1)",
        "tuned", "lm-policy(Qwen2-0.5B)[lm_head=scores]", "lm-policy(SmolLM2-135M-Instruct.Q4_1)[lm_features=onehot]"]
    # names that would be the same show the entries as written
    same = display_names(parse_methods("llamacpp:/a/M.gguf,llamacpp:/b/M.gguf"))
    assert list(same.values()) == ["llamacpp:/a/M.gguf", "llamacpp:/b/M.gguf"]
    assert path_stem("/m/Qwen2-0.5B/") == "Qwen2-0.5B"


def test_results_md_names_methods_by_their_short_names(tmp_path: Path) -> None:
    entries = [f"llamacpp:{SMOL}", "offline"]
    tasks = plan("FrozenLake-v1.deterministic", entries, [0], tmp_path, {})
    rows = [ResultRow(backend=t.backend, seed=0, status="ok", best_heldout_mean=1.0, method=t.label, llm_calls=4,
                      wall_s=3.0) for t in tasks]
    md = results_markdown(SweepRecord(env_id="FrozenLake-v1", backends=entries, seeds=[0]), rows)
    assert "| llamacpp:SmolLM2-135M-Instruct.Q4_1 | no | 1/1 |" in md and "/root/.cache" not in md
    # a results.csv written before the method column shows the entry's own short name
    old = ResultRow(backend=f"llamacpp:{SMOL}", seed=0, status="ok")
    assert old.name == "llamacpp:SmolLM2-135M-Instruct.Q4_1"


def test_cached_runs_show_their_cached_calls_and_stay_out_of_wall_time() -> None:
    rows = [ResultRow(backend="openai:m", seed=0, status="ok", llm_calls=8, cached_calls=8, wall_s=0.2,
                      best_heldout_mean=1.0, is_llm=True),
            ResultRow(backend="openai:m", seed=1, status="ok", llm_calls=8, cached_calls=0, wall_s=200.0,
                      best_heldout_mean=1.0, is_llm=True),
            ResultRow(backend="offline", seed=0, status="ok", llm_calls=4, wall_s=1.0, best_heldout_mean=1.0)]
    llm, off = backend_stats(rows)
    assert (llm.wall_s, llm.cached_runs, llm.cached_calls) == (200.0, 1, 4.0)
    assert (off.wall_s, off.cached_runs, off.cached_calls) == (1.0, 0, 0.0)
    md = results_markdown(SweepRecord(env_id="CartPole-v1", backends=["openai:m", "offline"], seeds=[0, 1]), rows)
    assert "| 8.0 (4.0 from the cache) |" in md and "| 200.0 (1 run all from the cache left out) |" in md
    assert "leaving out runs whose every call was answered from the answer cache" in md


# ---------------------------------------------------------------------------------------------------- the command
def _compare(tmp_path: Path, out: Path, methods: str, *extra: str) -> list[str]:
    cfg = tmp_path / "small.toml"
    cfg.write_text("[train]\nheldout-episodes = 10\ntrain-episodes = 2\n")
    return ["compare", "--env", "FrozenLake-v1.deterministic", "--methods", methods, "--seeds", "0",
            "--iterations", "1", "--config", str(cfg), "--out", str(out), *extra]


def test_a_compare_with_a_label_and_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    argv = _compare(tmp_path, out, "base=offline,@q-learning[q_alpha=0.3;q-epsilon-start=0.5],random")
    assert main(argv) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    rows = read_results(out / "results.csv")
    qid = parse_method("@q-learning[q_alpha=0.3;q-epsilon-start=0.5]").run_id(0)
    assert [(r.backend, r.method, Path(str(r.run_dir)).name) for r in rows] == [
        ("base=offline", "base", "base_s0"), ("@q-learning[q_alpha=0.3;q-epsilon-start=0.5]",
                                               "@q-learning[q_alpha=0.3;q_epsilon_start=0.5]", qid),
        ("random", "random", "random_s0")]
    configs = {r.method: json.loads((out / str(r.run_dir) / "config.json").read_text())["config"] for r in rows}
    assert configs["@q-learning[q_alpha=0.3;q_epsilon_start=0.5]"]["q_alpha"] == 0.3
    assert configs["base"]["q_alpha"] != 0.3 and configs["base"]["mode"] == "table"  # options of that method only
    assert "| base | no | 1/1 |" in captured.out
    assert "[1/3] base seed 0: best" in captured.err  # the console's line per run (no terminal: no bar)
    with open(out / "results.csv", newline="") as fh:
        header = next(csv.reader(fh))
        assert header.index("method") > header.index("status")  # a column added after the old ones
    assert "--methods 'base=offline,@q-learning[q_alpha=0.3;q-epsilon-start=0.5],random'" in \
        json.loads((out / "compare.json").read_text())["command"]
    # the same command again skips every run; --backends is the old spelling of --methods
    assert main([*argv[:3], "--backends", *argv[4:]]) == 0
    assert "3 of 3 runs finished earlier: skipped" in capsys.readouterr().err


@pytest.mark.parametrize(("methods", "message"), [
    ("offline[lm_model=/m/x.gguf]", "lm_model does not apply to it: mode table (it is an option of mode lm-policy)"),
    ("q-learning[reward_potential_bound=2]", "reward_potential_bound does not apply to it: mode q-learning"),
    ("offline[base_url=http://127.0.0.1:9]", "base_url does not apply to it"),
    ("offline[nothing_like_it=1]", "unknown setting 'nothing_like_it'"),
])
def test_an_option_that_does_not_apply_is_refused_before_anything_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], methods: str, message: str) -> None:
    out = tmp_path / "cmp"
    assert main(_compare(tmp_path, out, f"random,{methods}")) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err
    assert not out.exists()


def test_train_says_when_a_setting_does_not_apply(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--env", "FrozenLake-v1.deterministic", "--backend", "offline", "--iterations", "1",
                 "--heldout-episodes", "5", "--logs-dir", str(tmp_path), "--no-progress", "--lm-model",
                 "/m/x.gguf"]) == 0
    assert "note: --lm-model has no effect on this run's mode table (it is an option of mode lm-policy)" in \
        capsys.readouterr().err


def test_a_sweep_setting_no_method_takes_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "small.toml"
    cfg.write_text("[train]\nheldout-episodes = 5\ntrain-episodes = 2\nlm-epochs = 2\nreward-potential-bound = 3.0\n")
    assert main(["compare", "--env", "FrozenLake-v1.deterministic", "--methods", "offline,offline@reward", "--seeds",
                 "0", "--iterations", "1", "--config", str(cfg), "--out", str(tmp_path / "cmp"), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "note: the setting lm_epochs has no effect on any method of this sweep (on offline: mode table (it is " \
        "an option of mode lm-policy))" in err
    assert "potential_bound" not in err  # offline@reward takes it


def test_a_compare_whose_calls_came_from_the_cache_says_so(fake_openai: Any, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    fake_openai.responder = TableResponder()
    cfg = tmp_path / "llm.toml"
    cfg.write_text("[train]\nheldout-episodes = 5\ntrain-episodes = 2\ncandidates = 2\nconfirm-episodes = 0\n")
    argv = ["compare", "--env", "CartPole-v1", "--methods", "gpt=openai:gpt-4.1-mini", "--seeds",
            "0", "--iterations", "1", "--config", str(cfg), "--no-progress"]
    assert main([*argv, "--out", str(tmp_path / "first")]) == 0, capsys.readouterr().err
    called = len(fake_openai.requests)
    assert called >= 2
    assert main([*argv, "--out", str(tmp_path / "again")]) == 0, capsys.readouterr().err
    assert len(fake_openai.requests) == called  # every answer came from the answer cache
    row, = read_results(tmp_path / "again" / "results.csv")
    assert row.cached and row.cached_calls == row.llm_calls >= 2
    md = (tmp_path / "again" / "results.md").read_text()
    assert f"({row.cached_calls:.1f} from the cache)" in md and "n/a (1 run all from the cache left out)" in md
    assert main(["report", str(tmp_path / "again"), "--out", str(tmp_path / "page.html")]) == 0
    page = (tmp_path / "page.html").read_text()
    assert "from the cache" in page and "1 run all from the cache left out" in page


def test_a_choice_spelt_like_none_is_the_choice_not_the_default() -> None:
    """``select=none`` is ``--select none`` (no keeper), not the setting left at its default (the keeper)."""
    assert parse_method("x=@lm-policy[lm_features=onehot;select=none]").options == {"lm_features": "onehot",
                                                                                   "select": "none"}
    assert parse_method("x=@lm-policy[lm_features=onehot;lm_model=none]").options["lm_model"] is None
