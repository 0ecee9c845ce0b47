"""A run that calls no model writes a small transcript (issue 59 item 14): its lines are packed (a prompt the line
before had is a reference to it, other texts are deflated against the earlier ones), the package's one reader gives
every line back whole, and ``replay:`` of such a run reproduces it exactly."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llm_policy_gen.cli import main
from llm_policy_gen.clients.base import Message
from llm_policy_gen.clients.transcript import Transcript, read_transcript
from llm_policy_gen.config import TrainConfig
from llm_policy_gen.errors import UserError
from llm_policy_gen.run import resume, train
from llm_policy_gen.run.files import RunDir
from llm_policy_gen.storage.runlog import read_jsonl


def quiet(_msg: str) -> None:
    pass


def cartpole(tmp_path: Path, run_id: str, iterations: int = 6, **kw: Any) -> TrainConfig:
    return TrainConfig(**{**dict(env_id="CartPole-v1", backend="offline", iterations=iterations, seed=0,
                                 logs_dir=str(tmp_path), run_id=run_id, progress=False, plots=False,
                                 heldout_episodes=5, cache=False), **kw})


def comparable(run: Path) -> tuple[list[dict[str, Any]], list[Any], Any]:
    """What a run computed: its events without wall times, its iteration policies and its best policy."""
    events = [{k: v for k, v in e.items() if k != "wall_s"} for e in read_jsonl(run / "events.jsonl")]
    policies = [json.loads(p.read_text()) for p in sorted((run / "policies").glob("iter_*.json"))]
    return events, policies, json.loads((run / "best_policy.json").read_text())


def without_times(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in line.items() if k != "latency_s"} for line in lines]


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train(cartpole(tmp_path_factory.mktemp("logs"), "offline"), log=quiet).run_dir


def test_an_offline_runs_transcript_is_small_and_its_lines_keep_the_contracts_keys(offline_run: Path) -> None:
    raw = read_jsonl(offline_run / "transcripts.jsonl")
    whole = RunDir(offline_run).load_transcripts()
    assert len(raw) == len(whole) == 6 * 4
    written = (offline_run / "transcripts.jsonl").stat().st_size
    unpacked = sum(len(json.dumps(line, separators=(",", ":"))) + 1 for line in whole)
    # 6 iterations of 4 candidates: 0.53 MB whole, about 45 KB packed (the first line keeps its texts)
    assert unpacked > 400_000 and written < 70_000 and written * 6 < unpacked
    for line in raw:  # every line keeps `messages` (each with its role) and `response_text`
        assert line["packed"] == 1 and "response_text" in line
        assert [m["role"] for m in line["messages"]] == ["system", "user"]
    first = raw[0]  # nothing before it to refer to: its texts are whole
    assert isinstance(first["response_text"], str) and all(isinstance(m["content"], str) for m in first["messages"])
    # the other candidates of an iteration name its first one's prompt; a later answer is deflated
    assert raw[1]["messages"][1]["content"] == {"same": [1, 1, 1]}
    assert set(raw[5]["response_text"]) == {"base", "zlib"}


def test_the_reader_gives_the_whole_prompt_and_answer(offline_run: Path) -> None:
    whole = RunDir(offline_run).load_transcripts()
    assert whole == read_transcript(offline_run / "transcripts.jsonl")
    for line in whole:
        assert "packed" not in line
        assert line["messages"][0]["role"] == "system" and line["messages"][1]["content"].startswith("# Task: CartPole")
        assert f"# Experience (iteration {line['iteration']})" in line["messages"][1]["content"]
        assert line["prompt_chars"] == sum(len(m["content"]) for m in line["messages"])
        assert json.loads(line["response_text"])["rows"]
    # the chosen candidate's answer is the table of its iteration's policy
    chosen = read_jsonl(offline_run / "events.jsonl")[2]["chosen"]
    answer = next(t for t in whole if t["iteration"] == 3 and t["candidate"] == chosen)
    table = json.loads((offline_run / "policies" / "iter_0003.json").read_text())["table"]
    assert [r["action"] for r in json.loads(answer["response_text"])["rows"]] == table


def test_a_replay_of_the_run_reproduces_it_and_sends_the_same_prompts(offline_run: Path, tmp_path: Path) -> None:
    again = train(cartpole(tmp_path, "replayed", backend=f"replay:{offline_run}"), log=quiet).run_dir
    assert comparable(again) == comparable(offline_run)
    # the replay's lines (a session's, written whole) hold the prompts it sent and the answers it got: byte for byte
    # those the packed lines give back
    sent, recorded = (sorted(RunDir(run).load_transcripts(), key=lambda t: (t["iteration"], t["candidate"]))
                      for run in (again, offline_run))  # a session writes candidates as they end
    assert [t["messages"] for t in sent] == [t["messages"] for t in recorded]
    assert [t["response_text"] for t in sent] == [t["response_text"] for t in recorded]
    by_file = train(cartpole(tmp_path, "by-file", backend=f"replay:{offline_run / 'transcripts.jsonl'}"),
                    log=quiet).run_dir
    assert comparable(by_file) == comparable(offline_run)


def test_a_resumed_run_reads_back_as_the_uninterrupted_one(offline_run: Path, tmp_path: Path) -> None:
    train(cartpole(tmp_path, "cut", iterations=3), log=quiet)
    resumed = resume(tmp_path / "CartPole-v1" / "cut", {"iterations": 6}, log=quiet).run_dir
    assert comparable(resumed) == comparable(offline_run)
    assert without_times(RunDir(resumed).load_transcripts()) == without_times(RunDir(offline_run).load_transcripts())


def test_rules_and_the_other_searches_pack_too(tmp_path: Path) -> None:
    for run_id, kw in (("rules", {"output_format": "rules"}), ("random", {"backend": "random"}),
                       ("kept-q", {"backend": "kept-table-q"})):
        run = train(cartpole(tmp_path, run_id, iterations=3, **kw), log=quiet).run_dir
        raw = read_jsonl(run / "transcripts.jsonl")
        assert all(line["packed"] == 1 for line in raw)
        again = train(cartpole(tmp_path, f"{run_id}-again", iterations=3, backend=f"replay:{run}",
                               **{k: v for k, v in kw.items() if k != "backend"}), log=quiet).run_dir
        assert comparable(again)[0] == comparable(run)[0]


def test_packing_gives_back_every_text_exactly_and_redacts_first(tmp_path: Path, monkeypatch) -> None:
    secret = "sk-test-0123456789"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    path = tmp_path / "transcripts.jsonl"
    transcript = Transcript(path, {"env_id": "CartPole-v1"})
    texts = ["", "a", "a\n", "ü 漢字 \u2028 end", "x" * 70_000 + "tail", "x" * 70_000 + "tail", f"key {secret}"]
    expected: list[dict[str, Any]] = []
    for i, text in enumerate(texts, start=1):
        for c in (1, 2):
            record = {"iteration": i, "candidate": c, "attempt": 1,
                      "messages": [Message("system", "same system").to_dict(), Message("user", text).to_dict()],
                      "response_text": text[::-1] + str(c)}
            transcript.write(record, pack=(i, c) != (1, 1))
            expected.append(record)
        # a model's line under a key a packed line had: later packed lines must not name that key's old texts
        record = {"iteration": i, "candidate": 2, "attempt": 1, "messages": [Message("user", "model").to_dict()],
                  "response_text": f"a model's answer {i}"}
        transcript.write(record)
        expected.append(record)
    raw = read_jsonl(path)
    assert sum(line.get("packed") == 1 for line in raw) == 2 * len(texts) - 1 and secret not in path.read_text()
    assert raw[-2]["messages"][0]["content"] == {"same": [7, 1, 1]}
    lines = [{k: v for k, v in t.items() if k != "env_id"} for t in read_transcript(path)]
    assert lines == json.loads(json.dumps(expected).replace(secret, "[REDACTED]"))


def broken(run: Path, tmp_path: Path, change: dict[str, Any]) -> Path:
    """A copy of ``run``'s transcript whose fifth line has ``change`` applied."""
    lines = read_jsonl(run / "transcripts.jsonl")
    lines[4] = {**lines[4], **change}
    path = tmp_path / "broken.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


@pytest.mark.parametrize("change", [
    {"response_text": {"base": [9, 9, 9], "zlib": "eJw="}},  # names a call no line before holds
    {"response_text": {"base": [1, 1, 1], "zlib": "bm90IHpsaWI="}},  # not a deflate stream
    {"messages": [{"role": "system", "content": {"same": [1, 1, 1]}}, {"role": "user", "content": {"base": [1, 1, 1],
                                                                                                   "zlib": "!"}}]},
    {"packed": 2},
])
def test_a_packed_line_that_cannot_be_read_back_is_one_line(offline_run: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             change: dict[str, Any]) -> None:
    path = broken(offline_run, tmp_path, change)
    with pytest.raises(UserError, match=r"line 5: a packed text cannot be read back .*changed by hand"):
        read_transcript(path)
    code = main(["train", "--env", "CartPole-v1", "--backend", f"replay:{path}", "--iterations", "1",
                 "--logs-dir", str(tmp_path / "logs"), "--no-plots", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "line 5: a packed text cannot be read back" in err and "Traceback" not in err
    assert not (tmp_path / "logs" / "CartPole-v1").exists()  # no run directory
