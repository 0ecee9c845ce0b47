"""Reference pages generated from the code at build time (an MkDocs hook, named in ``mkdocs.yml``).

A page that holds a marker line gets it replaced when the site is built:

* ``<!-- generated: train-options -->``: one row per field of :class:`llm_policy_gen.config.TrainConfig` (the
  setting's name in a TOML file, its ``train`` flag read from the real argument parser, its default, the values it
  accepts and its docstring), then one table per plug-in's options under the plug-in's name (the
  :class:`~llm_policy_gen.registry.PluginOptions` of each registered mode, backend, answer format and logger), then
  the ``train`` flags that are not settings;
* ``<!-- generated: commands -->``: every command's ``--help`` text, as the parser prints it.

Nothing generated is committed: the pages in ``docs/reference/`` hold the markers and the prose around them, so the
tables always say what the code does. ``tests/test_docs.py`` checks the tables against the fields and flags.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["train_options", "old_names", "commands", "on_page_markdown", "MARKERS"]


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its sub-commands here, with no public accessor
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _command(name: str) -> argparse.ArgumentParser:
    from llm_policy_gen.cli import build_parser

    return _subparsers(build_parser())[name]


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _default(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{json.dumps(value)}`" if isinstance(value, str | list | dict) else f"`{value}`"


def _flags_by_setting(parser: argparse.ArgumentParser, names: set[str]) -> tuple[dict[str, str], list[Any]]:
    """The flag of each setting (``--no-cache`` sets ``cache``), and the flags that are not settings."""
    by_setting: dict[str, str] = {}
    others: list[Any] = []
    for action in parser._actions:
        flags = [s for s in action.option_strings if s.startswith("--")]
        if not flags or isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue  # an old name's flag is listed with the old names
        dest = action.dest
        name = dest if dest in names else dest[3:] if dest.startswith("no_") and dest[3:] in names else None
        if name is None:
            others.append(action)
        else:
            by_setting[name] = ", ".join(f"`{f}`" for f in flags)
    return by_setting, others


def train_options() -> str:
    """The tables of ``train`` settings and flags, as Markdown: the shared settings, then each plug-in's options."""
    from llm_policy_gen.config import options

    every = options()
    flags, others = _flags_by_setting(_command("train"), set(every))
    sections = list(dict.fromkeys(o.section for o in every.values()))
    rows: list[str] = []
    for section in sections:
        if section:
            rows += ["", f"## Options of {section}", ""]
        rows += ["| setting | flag | default | accepted | what it does |", "| --- | --- | --- | --- | --- |"]
        for name, o in every.items():
            if o.section == section:
                flag = flags.get(name, "(config file only)")
                rows.append(f"| `{name}` | {flag} | {_default(o.default)} | {_cell(o.accepted)} | "
                            f"{_cell(o.description)} |")
    rows += ["", "Flags of `train` that are not settings:", "", "| flag | what it does |", "| --- | --- |"]
    for action in others:
        flag = ", ".join(f"`{f}`" for f in action.option_strings)
        rows.append(f"| {flag} | {_cell(action.help or '')} |")
    return "\n".join(rows + ["", *old_names()]) + "\n"


def old_names() -> list[str]:
    """The old setting names still accepted (``llm_policy_gen/schema/aliases.py``), as Markdown lines."""
    from llm_policy_gen.config import options
    from llm_policy_gen.schema.aliases import OLD_FLAGS, Q_LEARNER_ALIASES, SETTING_ALIASES

    rows = ["Old names, still accepted in a TOML file, a run's `config.json`, an env spec's `[train_defaults]` and on "
            "the command line (not listed by `--help`; a one-line note says it is deprecated); `config.json` records "
            "today's name:", "", "| old name | old flag | today's setting | today's flag |",
            "| --- | --- | --- | --- |"]
    flags = {setting: flag for flag, setting in OLD_FLAGS.items()}
    for old, new in {**SETTING_ALIASES, **Q_LEARNER_ALIASES}.items():
        old_flag = f"`{flags[new]}`" if flags.get(new) and flags[new] != options()[new].flag else "(the same)"
        rows.append(f"| `{old}` | {old_flag} | `{new}` | `{options()[new].flag}` |")
    for flag, new in OLD_FLAGS.items():
        if new not in {**SETTING_ALIASES, **Q_LEARNER_ALIASES}.values():  # a flag renamed, its key the same
            rows.append(f"| (the same) | `{flag}` | `{new}` | `{options()[new].flag}` |")
    return rows


def commands() -> str:
    """Every command's ``--help``, as Markdown sections."""
    from llm_policy_gen.cli import build_parser

    parser = build_parser()
    parts: list[str] = []

    def text(p: argparse.ArgumentParser) -> str:
        p.formatter_class = lambda prog: argparse.HelpFormatter(prog, width=100, max_help_position=32)
        return p.format_help().rstrip()

    parts += ["```text", text(parser), "```", ""]
    for name, sub in _subparsers(parser).items():
        parts += [f"## `{name}`", "", "```text", text(sub), "```", ""]
    return "\n".join(parts)


MARKERS = {"<!-- generated: train-options -->": train_options, "<!-- generated: commands -->": commands}


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: replace each marker line with what it names."""
    for marker, make in MARKERS.items():
        if marker in markdown:
            markdown = markdown.replace(marker, make())
    return markdown
