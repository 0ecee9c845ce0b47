"""``llm-policy-gen backends``: every backend, whether it is configured and which one ``train`` uses by default
(never a key's value)."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    """Register ``backends``."""
    p = sub.add_parser("backends", help="list backends and whether each is configured (never prints a key)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--check", action="store_true", help="ask local servers (ollama) whether they answer")
    p.set_defaults(func=_cmd_backends)


def _cmd_backends(args: argparse.Namespace) -> int:
    from ..backends import default_backend_spec, list_backends
    from ..clients.keys import load_env_noted

    load_env_noted()
    rows = list_backends(check_servers=args.check)
    name, why = default_backend_spec()
    if args.json:
        print(json.dumps({"backends": rows, "default": name, "default_reason": why}, indent=2))
        return 0
    print(f"{'backend':<10} {'default model':<20} {'LLM':<4} {'configured':<12} key variable / note")
    for r in rows:
        note = r["key_variable"] or r["description"]
        if not r["is_llm"]:
            note = "NOT an LLM: " + r["description"]
        conf = {True: "yes", False: "no", None: "not checked"}[r["configured"]]
        print(f"{r['name']:<10} {r['default_model'] or '-':<20} {'yes' if r['is_llm'] else 'no':<4} "
              f"{conf:<12} {note}")
    if any(r["configured"] is None for r in rows):
        print("(ollama: 'not checked' -- `backends --check` asks its server)")
    print(f"train without --backend uses: {name} ({why})")
    return 0
