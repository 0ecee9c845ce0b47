"""The documentation: the generated options table agrees with the config fields and the parser, the README's links
resolve and it stays short. (``make docs`` builds the site itself with ``mkdocs build --strict``.)"""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path
from types import ModuleType

from llm_policy_gen.cli import build_parser
from llm_policy_gen.config import TrainConfig, options

ROOT = Path(__file__).resolve().parents[1]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _train_parser() -> argparse.ArgumentParser:
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices["train"]
    raise AssertionError("no sub-commands in the parser")


def test_the_options_table_has_every_setting_with_its_default_and_every_train_flag() -> None:
    table = _generator().train_options()
    rows = {m.group(1): line for line in table.splitlines() if (m := re.match(r"\| `(\w+)` \|", line))}
    assert set(TrainConfig.model_fields) <= set(rows), set(TrainConfig.model_fields) - set(rows)
    assert len(rows) >= 50
    assert "| `--candidates` | `4` | an integer in 1..64 |" in rows["candidates"]
    assert "| `--no-cache` | `true` |" in rows["cache"]
    assert "| `--explore-epsilon` | `0.1` |" in rows["explore_epsilon"]
    assert "| (config file only) | `[]` |" in rows["explicit"]
    every = options()  # the plug-ins' options too, each under its plug-in's heading
    assert set(every) <= set(rows), set(every) - set(rows)
    assert "## Options of mode reward" in table and "## Options of backend llamacpp" in table
    for name, option in every.items():  # every number's default, as the field has it
        if type(option.default) in (int, float):
            assert f"| `{option.default}` |" in rows[name], name
    flags = {s for a in _train_parser()._actions for s in a.option_strings if s.startswith("--") and s != "--help"}
    shown = set(re.findall(r"`(--[a-z-]+)`", table))
    assert flags and flags <= shown, flags - shown


def test_the_commands_page_shows_every_command_help() -> None:
    page = _generator().commands()
    for command in ("train", "evaluate", "envs", "backends"):
        assert f"## `{command}`" in page
        assert f"usage: llm-policy-gen {command}" in page
    assert "--heldout-episodes" in page


def test_the_hook_fills_the_marker_of_the_options_page() -> None:
    gen = _generator()
    page = (ROOT / "docs" / "reference" / "options.md").read_text()
    assert "<!-- generated: train-options -->" in page
    filled = gen.on_page_markdown(page)
    assert "<!-- generated" not in filled and "| `env_id` | `--env` |" in filled


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) >= 10
    missing = [link for link in links if not link.startswith("http") and not (ROOT / link).exists()]
    assert not missing, missing
