"""Digests of fixed offline runs, to show that a refactoring changed no result.

    python tools/run_digest.py --save before.json      # on the commit before the move
    python tools/run_digest.py --check before.json     # after it: exit 1 and the differing files if any

Each case trains one run with the ``offline`` stand-in (not an LLM) at a fixed seed, in a temporary folder, and
hashes what it wrote: ``events.jsonl``, ``transcripts.jsonl``, ``summary.json``, ``best_policy.json`` and every
``policies/iter_*.json``. Wall times (``wall_s``, ``latency_s``) are left out, since they differ from one run to the
next; everything else must be byte-equal. The runs take a few seconds each.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

#: (name, train arguments): the three environments issue 17 names, and every mode and answer format on one of them.
CASES: list[tuple[str, list[str]]] = [
    ("cartpole", ["--env", "CartPole-v1", "--iterations", "8", "--candidates", "2"]),
    ("frozenlake", ["--env", "FrozenLake-v1.deterministic", "--iterations", "8", "--candidates", "2"]),
    ("mountaincar", ["--env", "MountainCar-v0", "--iterations", "6", "--candidates", "2"]),
    ("cartpole-rules", ["--env", "CartPole-v1", "--iterations", "4", "--output-format", "rules"]),
    ("cartpole-reward", ["--env", "CartPole-v1", "--iterations", "3", "--mode", "reward"]),
    ("cartpole-advisor", ["--env", "CartPole-v1", "--iterations", "3", "--mode", "advisor"]),
]
WALL_KEYS = frozenset({"wall_s", "latency_s"})


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in WALL_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _digest(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        lines = [json.dumps(_strip(json.loads(line)), sort_keys=False) for line in text.splitlines() if line.strip()]
        text = "\n".join(lines)
    elif path.suffix == ".json":
        text = json.dumps(_strip(json.loads(text)))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_case(name: str, args: list[str], root: Path) -> dict[str, str]:
    cmd = [sys.executable, "-m", "llm_policy_gen", "train", *args, "--backend", "offline", "--seed", "0",
           "--no-plots", "--no-progress", "--logs-dir", str(root), "--run-id", name]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False,
                         env={"LLM_POLICY_GEN_NO_DOTENV": "1", "PATH": "/usr/bin:/bin", "HOME": str(root)})
    if out.returncode != 0:
        raise SystemExit(f"run_digest: {name} exited {out.returncode}: {out.stderr.strip()[-400:]}")
    run = next(root.glob(f"*/{name}"))
    files = ["events.jsonl", "transcripts.jsonl", "summary.json", "best_policy.json",
             *sorted(str(p.relative_to(run)) for p in (run / "policies").glob("iter_*.json"))]
    return {f: _digest(run / f) for f in files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="FILE")
    group.add_argument("--check", metavar="FILE")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        digests = {name: run_case(name, case, Path(tmp)) for name, case in CASES}
    if args.save:
        Path(args.save).write_text(json.dumps(digests, indent=1) + "\n")
        print(f"{sum(len(d) for d in digests.values())} files of {len(digests)} runs saved to {args.save}")
        return 0
    before = json.loads(Path(args.check).read_text())
    differ = [f"{name}/{f}" for name in sorted(set(before) | set(digests))
              for f in sorted(set(before.get(name, {})) | set(digests.get(name, {})))
              if before.get(name, {}).get(f) != digests.get(name, {}).get(f)]
    for d in differ:
        print(f"differs: {d}")
    print(f"{sum(len(d) for d in digests.values())} files of {len(digests)} runs: "
          f"{'byte-equal (wall times aside)' if not differ else f'{len(differ)} differ'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
