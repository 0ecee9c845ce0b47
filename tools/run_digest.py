"""Digests of fixed offline runs, to show that a refactoring changed no result.

    python tools/run_digest.py --save before.json      # on the commit before the move
    python tools/run_digest.py --check before.json     # after it: exit 1 and the differing files if any

Each case trains one run at a fixed seed, in a temporary folder (the ``offline`` stand-in, not an LLM, for the table
modes; the standard q-learner; a one-hot ``lm-policy`` run when the ``lm-policy`` extra is installed), and hashes
what it wrote: ``events.jsonl``, ``transcripts.jsonl``, ``summary.json``, ``best_policy.json`` and every
``policies/iter_*.json`` (``transcripts.jsonl`` as the package's reader gives it back, its packed lines whole, so
that a change of how lines are stored is no difference, only one of what they hold). Wall times (``wall_s``,
``latency_s``) are left out, since they differ from one run to the next. The JSON files are compared under
normalised keys: the renames of layout 2 (:data:`RENAMES`, an old key and its new name holding the same value count
once) and the stamp ``schema_version`` do not count as a difference; everything else must be equal. The runs take a
few seconds each.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from llm_policy_gen.run.files import RunDir

#: (name, train arguments): the three environments issue 17 names, and every mode and answer format on one of them;
#: ``{lake}`` is a settings file of the deterministic 4x4 lake (written out, so that a change of FrozenLake-v1's
#: default kwargs is no difference here).
CASES: list[tuple[str, list[str]]] = [
    ("cartpole", ["--env", "CartPole-v1", "--iterations", "8", "--candidates", "2"]),
    ("frozenlake", ["--env", "FrozenLake-v1", "--config", "{lake}", "--iterations", "8", "--candidates", "2"]),
    ("mountaincar", ["--env", "MountainCar-v0", "--iterations", "6", "--candidates", "2"]),
    ("cartpole-rules", ["--env", "CartPole-v1", "--iterations", "4", "--output-format", "rules"]),
    ("cartpole-reward", ["--env", "CartPole-v1", "--iterations", "3", "--mode", "reward"]),
    ("cartpole-advisor", ["--env", "CartPole-v1", "--iterations", "3", "--mode", "advisor"]),
    ("cartpole-q-learning", ["--env", "CartPole-v1", "--iterations", "6", "--backend", "q-learning"]),
    ("frozenlake-lm-onehot", ["--env", "FrozenLake-v1", "--config", "{lake}", "--iterations", "3", "--mode",
                              "lm-policy", "--lm-features", "onehot", "--lm-n-steps", "64", "--lm-batch-size", "32",
                              "--lm-epochs", "1"]),
]
LAKE_TOML = "env_kwargs = { is_slippery = false }\n"
WALL_KEYS = frozenset({"wall_s", "latency_s", "schema_version"})
RENAMES = {"eval_mean": "test_mean", "eval_returns": "test_returns", "eval_episodes": "test_episodes",
           "best_eval_mean": "best_heldout_mean", "best_eval_std": "best_heldout_std",
           "best_eval_episodes": "best_heldout_episodes"}
"""Layout 1's key -> layout 2's name for the same figure (``llm_policy_gen.schema.aliases`` keeps the package's
copy; this one is the tool's own, so that it reads the commit before a rename as well as the one after)."""


def _strip(value: object) -> object:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            if k in WALL_KEYS:
                continue
            name = RENAMES.get(k, k)
            if name in out and out[name] != _strip(v):
                out[f"{k} (differs from {name})"] = _strip(v)
                continue
            out[name] = _strip(v)
        return dict(sorted(out.items()))
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _digest(path: Path, rows: list[dict[str, object]] | None = None) -> object:
    """A ``.jsonl`` file's hash under normalised keys (of ``rows`` when given: the lines as the package reads them);
    a ``.json`` file's normalised object itself, so that a check names the keys that differ."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return _strip(json.loads(text))
    if path.suffix == ".jsonl":
        objs = rows if rows is not None else [json.loads(line) for line in text.splitlines() if line.strip()]
        text = "\n".join(json.dumps(_strip(obj), sort_keys=False) for obj in objs)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _differences(before: object, after: object) -> str:
    """What differs between two digests of one file (the keys, for a JSON object)."""
    if isinstance(before, dict) and isinstance(after, dict):
        added = sorted(k for k in after if k not in before)
        gone = sorted(k for k in before if k not in after)
        changed = sorted(k for k in before if k in after and before[k] != after[k])
        return "; ".join(f"{what}: {', '.join(keys)}" for what, keys in
                         (("added", added), ("removed", gone), ("changed", changed)) if keys)
    return "content"


def run_case(name: str, args: list[str], root: Path) -> dict[str, object]:
    lake = root / "lake.toml"
    lake.write_text(LAKE_TOML)
    args = [a.format(lake=lake) for a in args]
    backend = [] if "--backend" in args else ["--backend", "offline"]
    cmd = [sys.executable, "-m", "llm_policy_gen", "train", *args, *backend, "--seed", "0",
           "--no-plots", "--no-progress", "--logs-dir", str(root), "--run-id", name]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False,
                         env={"LLM_POLICY_GEN_NO_DOTENV": "1", "PATH": "/usr/bin:/bin", "HOME": str(root)})
    if out.returncode != 0:
        raise SystemExit(f"run_digest: {name} exited {out.returncode}: {out.stderr.strip()[-400:]}")
    run = next(root.glob(f"*/{name}"))
    rd = RunDir(run)  # the names of the commit under test (the reader's module has them since layout 1)
    files = [rd.events.name, rd.transcripts.name, rd.summary.name, rd.best_policy.name,
             *sorted(str(p.relative_to(run)) for p in rd.iteration_policies().values())]
    whole = {rd.transcripts.name: rd.load_transcripts()}  # packed lines (calls no model answered) read back whole
    return {f: _digest(run / f, whole.get(f)) if (run / f).is_file() else "missing" for f in files}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", metavar="FILE")
    group.add_argument("--check", metavar="FILE")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        digests = {name: run_case(name, case, Path(tmp)) for name, case in CASES
                   if "lm-policy" not in case or importlib.util.find_spec("stable_baselines3") is not None}
    if args.save:
        Path(args.save).write_text(json.dumps(digests, indent=1) + "\n")
        print(f"{sum(len(d) for d in digests.values())} files of {len(digests)} runs saved to {args.save}")
        return 0
    before = json.loads(Path(args.check).read_text())
    differ = [f"{name}/{f}" for name in sorted(set(before) | set(digests))
              for f in sorted(set(before.get(name, {})) | set(digests.get(name, {})))
              if before.get(name, {}).get(f) != digests.get(name, {}).get(f)]
    for d in differ:
        name, _, f = d.partition("/")
        print(f"differs: {d} ({_differences(before.get(name, {}).get(f), digests.get(name, {}).get(f))})")
    print(f"{sum(len(d) for d in digests.values())} files of {len(digests)} runs: "
          f"{'byte-equal (wall times aside)' if not differ else f'{len(differ)} differ'}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
