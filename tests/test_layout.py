"""The package's layout shows the pipeline (issue 30 item 6): a small root, stage and infrastructure subpackages,
one ``commands/`` for every subcommand, no two modules sharing a stem, prompts shipped as package data."""

from __future__ import annotations

import tomllib
from collections import defaultdict
from importlib import resources
from pathlib import Path

from llm_policy_gen import cli
from llm_policy_gen.backends import BACKENDS
from llm_policy_gen.formats import FORMATS
from llm_policy_gen.loggers.writers import LOGGERS
from llm_policy_gen.modes import MODES
from llm_policy_gen.storage.templates import prompts_dir

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "llm_policy_gen"


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_root_holds_at_most_ten_modules() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= 10, root


def _plugin_modules() -> set[str]:
    """Modules that hold a registered plug-in named after its registry key (``q-learning`` may live in
    ``qlearning.py``), and the modules of the subcommands (named after the command)."""
    named: set[str] = set()
    for registry in (BACKENDS, FORMATS, MODES, LOGGERS):
        for name in registry.names():
            module = registry.entry(name).entry_point.split(":")[0]
            stem = module.rsplit(".", 1)[-1]
            if stem in {name.replace("-", "_"), name.replace("-", "")}:
                named.add(module)
    named.update(m for m in cli.COMMANDS)
    return named


def test_no_two_modules_share_a_stem_but_base_init_and_plugins_named_after_their_key() -> None:
    by_stem: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        dotted = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        by_stem[path.stem].append(dotted)
    exempt = _plugin_modules()
    shared = {stem: mods for stem, mods in by_stem.items()
              if stem not in {"__init__", "base"} and len([m for m in mods if m not in exempt]) > 1}
    assert shared == {}
    # the check can fail: a second plain `keeper.py` would be found
    assert "llm_policy_gen.keeper" in by_stem["keeper"] and len(by_stem["keeper"]) == 1


def test_every_subcommand_lives_in_commands() -> None:
    assert cli.COMMANDS and all(m.startswith("llm_policy_gen.commands.") for m in cli.COMMANDS)
    commands = {p.stem for p in (PACKAGE / "commands").glob("*.py")}
    assert {"train", "evaluate", "envs", "backends", "compare", "plot", "report"} <= commands


def test_prompts_are_package_data_read_with_importlib_resources(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("LLM_POLICY_GEN_PROMPTS", raising=False)
    shipped = resources.files("llm_policy_gen.prompting") / "prompts"
    assert (shipped / "system.md").is_file() and (shipped / "hints" / "CartPole-v1.md").is_file()
    assert prompts_dir() == Path(str(shipped))
    assert not (ROOT / "prompts").exists()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    globs = data["tool"]["setuptools"]["package-data"]["llm_policy_gen"]
    assert "prompting/prompts/*.md" in globs and "prompting/prompts/hints/*.md" in globs
    assert "data-files" not in data["tool"]["setuptools"]
