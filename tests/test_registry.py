"""Plug-ins by name: answer formats, modes and backends. A misspelt name gets the close matches; a format or a mode
written here, in the test, and registered by name runs a real ``train``."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any, get_type_hints

import numpy as np
import pytest
from run_helpers import cfg, quiet

from llm_policy_gen.backends import BACKENDS, parse_backend_spec
from llm_policy_gen.cli import main
from llm_policy_gen.clients.transcript import read_transcript
from llm_policy_gen.errors import BackendConfigError, ProposalError, UserError
from llm_policy_gen.formats import FORMATS, make_format, resolve_format_name
from llm_policy_gen.formats.base import AnswerFormat, FormatContext, Parsed, Target
from llm_policy_gen.modes import MODES
from llm_policy_gen.modes.base import Mode, RunServices, Setup, Step
from llm_policy_gen.policy import TablePolicy
from llm_policy_gen.registry import Registry
from llm_policy_gen.run import resume, train
from llm_policy_gen.run.checkpoint import load_checkpoint
from llm_policy_gen.storage.runlog import read_jsonl

run_cfg = partial(cfg, env_id="CartPole-v1", iterations=2, heldout_episodes=5, candidates=2, cache=True)


# ----------------------------------------------------------------------------------------------- the registry
def test_registry_loads_lazily_and_suggests_close_names() -> None:
    reg: Registry[Any] = Registry("widget", "--widget")
    reg.register("json-dumps", "json:dumps", description="d")
    assert "json-dumps" in reg and reg.names() == ["json-dumps"] and list(reg) == ["json-dumps"]
    assert reg.entry("json-dumps").info == {"description": "d"} and reg.load("json-dumps") is json.dumps
    with pytest.raises(UserError, match=r"^unknown widget 'json-dump' for --widget; did you mean json-dumps\? "
                                        r"\(accepted: json-dumps\)$"):
        reg.load("json-dump")
    with pytest.raises(ValueError, match="module:attribute"):
        reg.register("bad", "json.dumps")
    reg.register("json-dumps", "json:loads")  # registering again replaces the entry
    assert reg.load("json-dumps") is json.loads
    reg.unregister("json-dumps")
    assert "json-dumps" not in reg and "did you mean" not in str(reg.unknown("zzz"))


@pytest.mark.parametrize(("registry", "typo", "suggestion"), [
    (FORMATS, "tabel", "table"), (FORMATS, "edit", "edits"), (MODES, "drect", "direct"), (MODES, "tables", "table"),
    (BACKENDS, "ofline", "offline"), (MODES, "q_learning", "q-learning"),
])
def test_unknown_names_suggest_close_matches(registry: Registry[Any], typo: str, suggestion: str) -> None:
    with pytest.raises(UserError, match=f"unknown .* '{typo}' for --.*; did you mean {suggestion}") as info:
        registry.entry(typo)
    assert "\n" not in str(info.value)


def test_unknown_names_through_train_and_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    with pytest.raises(UserError, match="unknown answer format 'tabel' for --output-format; did you mean table"):
        train(run_cfg(tmp_path / "a", output_format="tabel"), log=quiet)
    assert not any((tmp_path / "a").rglob("config.json"))  # the refused run left no run directory
    with pytest.raises(UserError, match="unknown mode 'drect' for --mode; did you mean direct"):
        train(run_cfg(tmp_path / "b", mode="drect"), log=quiet)
    with pytest.raises(BackendConfigError, match="unknown backend 'ofline' for --backend; did you mean offline"):
        parse_backend_spec("ofline:x")
    for args, message in ((["--backend", "ofline"], "did you mean offline"),
                          (["--mode", "drect"], "did you mean direct")):
        code = main(["train", "--logs-dir", str(tmp_path / "c"), "--no-plots", "--no-progress", *args])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    code = main(["train", "--logs-dir", str(tmp_path / "c"), "--backend", "offline", "--output-format", "edit"])
    err = capsys.readouterr().err
    assert code == 2 and "did you mean edits" in err.strip().splitlines()[-1] and "Traceback" not in err, err
    assert not any((tmp_path / "c").rglob("config.json"))


def test_an_unknown_output_format_is_one_line_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["train", "--logs-dir", str(tmp_path), "--backend", "offline", "--output-format", "edit"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1, err


# ----------------------------------------------------------------------------------------------- a format of our own
class DigitsFormat(AnswerFormat[np.ndarray]):
    """``digits``: the whole table as one line ``TABLE: a0 a1 a2 ...`` (plain text, action targets only)."""

    name = "digits"

    def json_schema(self, ctx: FormatContext) -> dict[str, Any] | None:
        return None

    def prompt_section(self, ctx: FormatContext) -> str:
        top = ctx.target.n_actions - 1
        return (f"Answer with one line `TABLE: a0 a1 ... a{ctx.n_states - 1}`: the action (0..{top}) of every state, "
                "state 0 first, separated by spaces. A line before it may say why.")

    def parse(self, text: str, ctx: FormatContext) -> Parsed[np.ndarray]:
        found = re.findall(r"TABLE:\s*([-0-9 ]*)", text or "")
        if not found:
            raise ProposalError(["no 'TABLE:' line found"], text)
        values = [int(x) for x in found[-1].split()]
        if len(values) != ctx.n_states:
            raise ProposalError([f"{len(values)} actions given, expected {ctx.n_states}"], text)
        errors = [f"state {s}: {why}" for s, a in enumerate(values) if (why := ctx.target.check(a))]
        if errors:
            raise ProposalError(errors[:3], text)
        table = ctx.target.array(values)
        rationale = text.split("TABLE:")[0].strip()
        return Parsed(table, rationale, int(np.sum(table != ctx.target.array(ctx.current))))

    def render(self, value: np.ndarray, ctx: FormatContext, rationale: str) -> str:
        return f"{rationale}\nTABLE: " + " ".join(str(int(a)) for a in np.asarray(value))


@pytest.fixture
def digits() -> Iterator[str]:
    FORMATS.register("digits", f"{__name__}:DigitsFormat", description="one line of digits (test example)")
    yield "digits"
    FORMATS.unregister("digits")
    assert "digits" not in FORMATS


def test_the_example_format_follows_the_protocol(digits: str) -> None:
    fmt = make_format(digits)
    assert isinstance(fmt, AnswerFormat) and isinstance(fmt, DigitsFormat)
    assert resolve_format_name(digits, 10_000) == digits


def test_a_registered_format_runs_a_real_training(tmp_path: Path, digits: str) -> None:
    res = train(run_cfg(tmp_path, output_format=digits), log=quiet)
    rd = res.run_dir
    config = json.loads((rd / "config.json").read_text())
    assert config["output_format"] == "digits" and config["config"]["output_format"] == "digits"
    lines = read_transcript(rd / "transcripts.jsonl")  # offline's lines are packed: the package's reader
    assert len(lines) == 2 * 2 and all(t["valid"] and t["format"] == "digits" for t in lines)
    assert all(t["response_text"].splitlines()[-1].startswith("TABLE: ") for t in lines)
    # offline sends no prompt (its lines are packed): replayed, the run's answers go through a session that asks the
    # prompt a model would get, with the format's section
    again = train(run_cfg(tmp_path / "again", output_format=digits, backend=f"replay:{rd}"), log=quiet)
    prompt = read_jsonl(again.run_dir / "transcripts.jsonl")[0]["messages"][-1]["content"]
    assert "Answer with one line `TABLE: a0 a1 ... a323`" in prompt and '"rows"' not in prompt
    # The chosen candidate of iteration 1 is the table its answer text holds.
    chosen = read_jsonl(rd / "events.jsonl")[0]["chosen"]
    line = next(t for t in lines if t["iteration"] == 1 and t["candidate"] == chosen)
    table = [int(a) for a in line["response_text"].splitlines()[-1].split()[1:]]
    assert TablePolicy.load(rd / "policies" / "iter_0001.json").table.tolist() == table
    assert res.summary["best_iteration"] >= 1 and res.summary["best_eval_mean"] > 100


def test_a_registered_format_sends_its_errors_back_for_repair(tmp_path: Path, digits: str) -> None:
    good = make_format(digits).render(np.ones(324, dtype=np.int64), None, "always right")  # type: ignore[arg-type]
    replay = tmp_path / "answers.jsonl"
    replay.write_text("".join(json.dumps(line) + "\n" for line in [
        {"iteration": 1, "candidate": 1, "attempt": 1, "response_text": "TABLE: 0 1"},
        {"iteration": 1, "candidate": 1, "attempt": 2, "response_text": good},
    ]))
    res = train(run_cfg(tmp_path / "logs", backend=f"replay:{replay}", output_format=digits, candidates=1,
                        iterations=1), log=quiet)
    first, second = read_jsonl(res.run_dir / "transcripts.jsonl")
    assert first["valid"] is False and first["errors"] == ["2 actions given, expected 324"]
    assert second["valid"] is True and second["attempt"] == 2
    assert "2 actions given, expected 324" in second["messages"][-1]["content"]  # the repair message
    assert second["messages"][-2] == {"role": "assistant", "content": "TABLE: 0 1"}
    assert np.array_equal(TablePolicy.load(res.run_dir / "policies" / "iter_0001.json").table, np.ones(324))


def test_an_unregistered_format_is_unknown_again(tmp_path: Path) -> None:
    assert "digits" not in FORMATS
    with pytest.raises(UserError, match="unknown answer format 'digits'"):
        train(run_cfg(tmp_path, output_format="digits"), log=quiet)


# ----------------------------------------------------------------------------------------------- a mode of our own
class SingleMode:
    """Table mode with one candidate per iteration, whatever ``--candidates`` says."""

    name = "single"
    needs_session = False
    judges_candidates = True

    def __init__(self) -> None:
        self.fmt: AnswerFormat[Any] | None = None
        self.target: Target | None = None
        self.asked = 0

    def prepare(self, setup: Setup, resumed: bool) -> dict[str, Any]:
        self.fmt = make_format(resolve_format_name(setup.cfg.output_format, setup.observation.n_states))
        self.target = Target("action", n_actions=setup.actions.n_actions)
        return {"output_format": self.fmt.name, "candidates_forced": 1}

    def start(self, run: RunServices) -> None:
        run.start_from_initial()

    def iterate(self, run: RunServices, iteration: int) -> Step:
        assert self.fmt is not None and self.target is not None
        train_eps = run.train_episodes(run.best_table, iteration, run.cfg.explore_epsilon)
        best_mean = run.score_best(iteration)
        ctx = run.context(iteration, self.fmt, self.target, run.best_table, best_mean)
        answers = run.propose(ctx, 1)
        self.asked += len(answers)
        verdict = run.judge([a.parsed.value if a.parsed else None for a in answers], iteration)
        return Step(train_eps, run.cfg.explore_epsilon, answers, verdict, verdict.accepted,
                    fields={"asked_so_far": self.asked})

    def finish(self, run: RunServices) -> dict[str, Any]:
        return {"asked": self.asked}

    def state_dict(self) -> dict[str, Any]:
        return {"asked": self.asked}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.asked = int(state["asked"])


@pytest.fixture
def single() -> Iterator[str]:
    MODES.register("single", f"{__name__}:SingleMode", description="one candidate per iteration (test example)")
    yield "single"
    MODES.unregister("single")


def test_the_example_mode_follows_the_protocol(single: str) -> None:
    """Every member of :class:`Mode` with the protocol's own parameters and attribute types (``isinstance`` on a
    runtime-checkable protocol only sees that the names exist), and a state that survives a round trip."""
    mode = MODES.load(single)()
    for name, kind in get_type_hints(Mode).items():
        assert isinstance(getattr(mode, name), kind), name
    methods = [n for n, f in vars(Mode).items() if inspect.isfunction(f) and not n.startswith("_")]
    assert methods == ["prepare", "start", "iterate", "finish", "state_dict", "load_state_dict"]
    for name in methods:
        want = list(inspect.signature(getattr(Mode, name)).parameters)
        assert list(inspect.signature(getattr(mode, name)).parameters) == want[1:], name  # bound: no self
    mode.asked = 3
    again = MODES.load(single)()
    again.load_state_dict(json.loads(json.dumps(mode.state_dict())))
    assert again.state_dict() == {"asked": 3}


def test_a_registered_mode_runs_a_real_training_and_resumes(tmp_path: Path, single: str) -> None:
    res = train(run_cfg(tmp_path, mode=single, candidates=4, iterations=2), log=quiet)
    rd, s = res.run_dir, res.summary
    assert s["mode"] == "single" and s["asked"] == 2 and s["iterations"] == 2 and s["llm_calls"] == 2
    events = read_jsonl(rd / "events.jsonl")
    assert [(e["mode"], e["candidates"], len(e["candidate_means"]), e["asked_so_far"]) for e in events] == [
        ("single", 1, 1, 1), ("single", 1, 1, 2)]
    assert [t["candidate"] for t in read_jsonl(rd / "transcripts.jsonl")] == [1, 1]
    config = json.loads((rd / "config.json").read_text())
    assert config["mode"] == "single" and config["candidates_forced"] == 1
    assert load_checkpoint(rd / "checkpoint.npz")["mode"] == {"asked": 2}
    # The mode's own state comes back from the checkpoint.
    more = resume(rd, {"iterations": 3}, log=quiet)
    assert more.summary["asked"] == 3 and more.summary["iterations"] == 3
    assert [e["asked_so_far"] for e in read_jsonl(rd / "events.jsonl")] == [1, 2, 3]


def test_a_plugin_whose_module_does_not_import_is_refused_loudly(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Its options used to vanish silently from --help and from every check (71 of 82 settings listed on a machine
    without gymnasium); now the command names the plug-in, its module and the error, exit 2, nothing made."""
    MODES.register("broken", "no_such_module_of_llm_policy_gen:BrokenMode", description="cannot import")
    try:
        code = main(["train", "--env", "CartPole-v1", "--logs-dir", str(tmp_path / "logs"), "--iterations", "1"])
    finally:
        MODES.unregister("broken")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "'broken'" in err and "no_such_module_of_llm_policy_gen:BrokenMode" in err and "ModuleNotFoundError" in err
    assert not (tmp_path / "logs").exists()
