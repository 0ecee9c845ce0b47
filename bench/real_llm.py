"""A real model in the loop, measured: small Qwen2.5-Coder models (GGUF, Q4_K_M) on 2 CPU cores.

    python bench/real_llm.py [--out ~/llm-policy-gen-bench/real_llm] [--cells qwen0.5b,qwen1.5b]
                             [--transports inprocess,server] [--seeds 0-2] [--list]

Cells (issue 18): Qwen2.5-Coder-0.5B-Instruct on FrozenLake-v1.deterministic (the lake without slip; full-table
answers) and on CartPole-v1 (``rules`` answers), seeds 0-2; Qwen2.5-Coder-1.5B-Instruct on
FrozenLake-v1.deterministic, seed 0. Every run: K = 2 candidates, 5 iterations, ``--max-prompt-tokens 2000``,
``--repair-attempts 2``. Each cell runs through both transports: the in-process backend (``llamacpp:PATH``) and the
``openai`` backend against the real ``llama_cpp.server`` on a loopback port (one request at a time,
``--max-concurrent-calls 1``; its prompts are capped at 5,000 characters, about 2,000 tokens, since only the
in-process backend knows the tokenizer). The baselines ``offline`` (not an LLM) and ``random`` run at the same
settings with ``--max-episodes`` set to the LLM run's episode count, once per transport (the two transports' runs of
a seed can end at different episode counts, so each gets its own baselines). The answer cache is off
(``--no-cache``): every figure comes from calls made by the run that reports it.

Reported per (model, task, transport), over the seeds: the valid-answer rate at the first attempt and after repairs
(per candidate the model answered; ``--rules-refine``'s refinements call no model and are counted apart, with the
adoptions each kind of proposal won), the best table's held-out mean (100 episodes, the run's held-out seeds)
against the initial table's and against offline's and random's, calls, prompt and answer tokens, and seconds per
call (calls answered by the model, not from a record or the cache).

Long: 10-140 s a call. Everything goes to ``--out`` (default outside the work tree); a finished run is read back, an
interrupted one resumed (``train --resume``), so the bench can be stopped and started again across sessions. The
models come from ``tools/fetch_model.py`` (registry packages read as data, sha256-checked). Not a test: it prints
figures (``results.md``, ``results.json`` in ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Cell:
    key: str
    model: str
    """A name of tools/fetch_model.py."""
    label: str
    env_id: str
    output_format: str
    seeds: tuple[int, ...]
    extra: tuple[str, ...] = ()
    """Options beyond :data:`SETTINGS` (issue 20 item 4: ``--evidence``, ``--rules-refine``)."""


#: Issue 20 item 4: the evidence a model sees and the hybrid, on CartPole-v1 rules (seeds 0-2, K = 2, 5 iterations).
_ITEM4 = {"summary": ("--evidence", "summary"), "both": ("--evidence", "both"), "refine1": ("--rules-refine", "1"),
          "refine2": ("--rules-refine", "2"), "summary-refine2": ("--evidence", "summary", "--rules-refine", "2")}

CELLS = [
    Cell("qwen0.5b-frozenlake", "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
         "FrozenLake-v1.deterministic", "auto", (0, 1, 2)),
    Cell("qwen0.5b-cartpole-rules", "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct Q4_K_M", "CartPole-v1",
         "rules", (0, 1, 2)),
    Cell("qwen1.5b-frozenlake", "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct Q4_K_M",
         "FrozenLake-v1.deterministic", "auto", (0,)),
    *(Cell(f"qwen0.5b-cartpole-rules-{name}", "qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
           "CartPole-v1", "rules", (0, 1, 2), extra) for name, extra in _ITEM4.items()),
]
SETTINGS = ["--candidates", "2", "--iterations", "5", "--max-prompt-tokens", "2000", "--repair-attempts", "2",
            "--max-output-tokens", "1500",
            "--no-plots", "--no-progress", "--timeout", "900", "--max-concurrent-calls", "1", "--no-cache"]
TRANSPORTS = ("inprocess", "server")
#: Through the server the prompt is measured in characters (``--max-prompt-tokens`` needs the tokenizer, which only
#: the in-process backend has): 5,000 characters are about 2,000 tokens of these prompts (2.4-2.6 characters a token).
SERVER_PROMPT_CHARS = 5000


def model_path(name: str) -> Path:
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "fetch_model.py"), "--path", name],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"real_llm: cannot fetch {name}: {out.stderr.strip()}")
    return Path(out.stdout.strip())


class Server:
    """``llama_cpp.server`` with one model on a loopback port (started on first use, stopped at exit)."""

    def __init__(self, model: Path, log: Path, port: int) -> None:
        self.model, self.log, self.port = model, log, port
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self) -> str:
        if self.proc is not None:
            return self.url
        port = self.port  # fixed, so that a run resumed in a later session names the same base URL
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise SystemExit(f"real_llm: port {port} is taken; stop what listens there")
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(self.model),
                                          "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192",
                                          "--n_threads", str(os.cpu_count() or 1), "--model_alias", "local"],
                                         stdout=out, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}/v1"
        import httpx2

        for _ in range(1200):
            if self.proc.poll() is not None:
                raise SystemExit(f"real_llm: llama_cpp.server ended; see {self.log}")
            try:
                if httpx2.get(self.url + "/models", timeout=1.0).status_code == 200:
                    return self.url
            except httpx2.HTTPError:
                pass
            time.sleep(0.25)
        raise SystemExit("real_llm: llama_cpp.server did not answer within 5 minutes")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.proc = None


def _cli(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-m", "llm_policy_gen", *args], capture_output=True, text=True, env=env,
                         cwd=ROOT, check=False)
    return out.returncode, out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""


def run(out: Path, run_id: str, env_id: str, argv: list[str], env: dict[str, str]) -> tuple[Path, str]:
    """One run, reused when finished, resumed when interrupted; returns its directory and an error ('' if none)."""
    run_dir = out / "runs" / env_id.partition(".")[0] / run_id  # a spec variant's runs: the gymnasium id's folder
    if (run_dir / "summary.json").is_file():
        summary = json.loads((run_dir / "summary.json").read_text())
        if summary.get("stop_reason") != "interrupted":
            return run_dir, ""
    if (run_dir / "config.json").is_file():
        code, last = _cli(["train", "--resume", str(run_dir), "--no-progress", *_resume_extra(argv)], env)
    else:
        code, last = _cli(["train", "--env", env_id, "--logs-dir", str(out / "runs"), "--run-id", run_id, *argv], env)
    return run_dir, "" if code == 0 else f"exit {code}: {last}"


def _resume_extra(argv: list[str]) -> list[str]:
    """What a resume must name again: a recorded base URL (the server's port changes between sessions)."""
    return argv[argv.index("--base-url"): argv.index("--base-url") + 2] if "--base-url" in argv else []


def initial_heldout(run_dir: Path) -> float:
    """The initial table's mean over the run's held-out seeds (what the LLM's tables must beat)."""
    from llm_policy_gen.collect import Collector
    from llm_policy_gen.config import TrainConfig
    from llm_policy_gen.keeper import SeedPlan
    from llm_policy_gen.run import resolve_spec

    record = json.loads((run_dir / "config.json").read_text())
    cfg = TrainConfig.model_validate(record["config"])
    spec = resolve_spec(cfg)
    seeds = [SeedPlan(cfg.seed).heldout(j) for j in range(cfg.heldout_episodes)]
    collector = Collector(spec)
    try:
        return float(collector.evaluate(spec.default_table(), seeds).mean)
    finally:
        collector.close()


def measure(run_dir: Path) -> dict[str, Any]:
    """Validity, tokens and timing from a run's transcript; the held-out means from its summary."""
    from llm_policy_gen.storage.runlog import read_jsonl

    every = read_jsonl(run_dir / "transcripts.jsonl")
    lines = [t for t in every if t.get("phase") != "refine"]  # model calls; --rules-refine's refinements call no model
    summary = json.loads((run_dir / "summary.json").read_text())
    first = [t for t in lines if int(t.get("attempt", 1)) == 1]
    by_candidate: dict[tuple[int, int], bool] = {}
    for t in lines:
        key = (int(t["iteration"]), int(t.get("candidate", 1)))
        by_candidate[key] = by_candidate.get(key, False) or bool(t.get("valid"))
    answered = [t for t in lines if not t.get("failed") and not t.get("reused") and not t.get("cached")]
    return {
        "candidates": len(first),
        "valid_first": sum(bool(t.get("valid")) for t in first),
        "valid_after_repair": sum(by_candidate.values()),
        "calls": len(lines),
        "refinements": len(every) - len(lines),
        "adopted": _adopted(run_dir, every),
        "failed_calls": sum(bool(t.get("failed")) for t in lines),
        "input_tokens": sum(int(t.get("input_tokens") or 0) for t in lines),
        "output_tokens": sum(int(t.get("output_tokens") or 0) for t in lines),
        "s_per_call": statistics.mean(float(t["latency_s"]) for t in answered) if answered else None,
        "heldout": summary["best_eval_mean"],
        "episodes": summary["episodes_total"],
        "initial": initial_heldout(run_dir),
        "stop": summary["stop_reason"],
    }


def _adopted(run_dir: Path, transcript: list[dict[str, Any]]) -> dict[str, int]:
    """Adoptions by what proposed the adopted table (the run's transcript lines say): the model or a refinement
    (``chosen`` counts from 1)."""
    from llm_policy_gen.storage.runlog import read_jsonl

    phase = {(int(t["iteration"]), int(t.get("candidate", 1))): str(t.get("phase")) for t in transcript}
    out = {"model": 0, "refine": 0}
    for e in read_jsonl(run_dir / "events.jsonl"):
        if e.get("accepted") and e.get("chosen") is not None:
            out["refine" if phase.get((int(e["iteration"]), int(e["chosen"]))) == "refine" else "model"] += 1
    return out


def _median(xs: list[float | None]) -> float | None:
    vals = [x for x in xs if x is not None]
    return statistics.median(vals) if vals else None


def _fmt(x: float | None, digits: int = 2) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def markdown(rows: list[dict[str, Any]]) -> str:
    head = ("| model (quantisation) | task | transport | seeds | valid 1st attempt | valid after repairs | held-out "
            "best (median) | initial table | offline | random | calls (failed) | refinements | adopted: model / "
            "refinement | tokens in/out | s per call |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    body = []
    for r in rows:
        m = r["runs"]
        if not m:
            continue
        cand = sum(x["candidates"] for x in m)
        med = lambda k, m=m: _median([x.get(k) for x in m])  # noqa: E731
        body.append(
            f"| {r['label']} | {r['env_id']}{' rules' if r['format'] == 'rules' else ''}"
            f"{' ' + r['extra'] if r.get('extra') else ''} | {r['transport']} | "
            f"{','.join(str(x['seed']) for x in m)} | {sum(x['valid_first'] for x in m)}/{cand} "
            f"({100 * sum(x['valid_first'] for x in m) / max(cand, 1):.0f}%) | "
            f"{sum(x['valid_after_repair'] for x in m)}/{cand} | {_fmt(med('heldout'))} | {_fmt(med('initial'))} | "
            f"{_fmt(med('offline'))} | {_fmt(med('random'))} | {sum(x['calls'] for x in m)} "
            f"({sum(x['failed_calls'] for x in m)}) | {sum(x.get('refinements', 0) for x in m)} | "
            f"{sum(x.get('adopted', {}).get('model', 0) for x in m)} / "
            f"{sum(x.get('adopted', {}).get('refine', 0) for x in m)} | {sum(x['input_tokens'] for x in m):,}/"
            f"{sum(x['output_tokens'] for x in m):,} | {_fmt(med('s_per_call'), 1)} |")
    return head + "\n".join(body) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(Path.home() / "llm-policy-gen-bench" / "real_llm"))
    ap.add_argument("--cells", default=",".join(c.key for c in CELLS), help="comma-separated cell keys (--list)")
    ap.add_argument("--transports", default=",".join(TRANSPORTS))
    ap.add_argument("--seeds", default=None, help="override the cells' seeds, e.g. 0 or 0-2")
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args(argv)
    if args.list:
        for c in CELLS:
            print(f"{c.key:40s} {c.label}, {c.env_id} ({c.output_format}{', ' if c.extra else ''}"
                  f"{' '.join(c.extra)}), seeds {list(c.seeds)}")
        return 0
    keys = [k for k in args.cells.split(",") if k]
    transports = [t for t in args.transports.split(",") if t]
    bad = [k for k in keys if k not in {c.key for c in CELLS}] + [t for t in transports if t not in TRANSPORTS]
    if bad:
        print(f"real_llm: unknown {bad[0]!r}; cells: {', '.join(c.key for c in CELLS)}; transports: "
              f"{', '.join(TRANSPORTS)}", file=sys.stderr)
        return 2
    seeds_override = None
    if args.seeds:
        from bench_args import seeds as seeds_arg

        parsed = seeds_arg("real_llm", args.seeds)
        if parsed is None:
            return 2
        seeds_override = tuple(parsed)
    from bench_args import out_dir

    out = out_dir("real_llm", args.out)
    if out is None:
        return 2
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LLM_POLICY_GEN_WORKERS": "1", "OPENAI_API_KEY": "sk-local", "LLM_POLICY_GEN_NO_DOTENV": "1"}
    servers: dict[str, Server] = {}
    rows: list[dict[str, Any]] = []
    try:
        for cell in (c for c in CELLS if c.key in keys):
            path = model_path(cell.model)
            for transport in transports:
                row: dict[str, Any] = {"cell": cell.key, "label": cell.label, "env_id": cell.env_id,
                                       "extra": " ".join(cell.extra),
                                       "format": cell.output_format, "transport": transport, "model_file": path.name,
                                       "runs": []}
                rows.append(row)
                for seed in seeds_override or cell.seeds:
                    common = [*SETTINGS, "--seed", str(seed), "--output-format", cell.output_format, *cell.extra]
                    if transport == "inprocess":
                        backend = ["--backend", f"llamacpp:{path}"]
                    else:
                        server = servers.setdefault(cell.model, Server(path, out / f"server-{cell.model}.log",
                                                                          18088 + len(servers)))
                        chars = out / "server_prompt.toml"  # the server's tokenizer is not known here
                        chars.write_text(f"max_prompt_chars = {SERVER_PROMPT_CHARS}\n")
                        backend = ["--backend", "openai:local", "--base-url", server.start(), "--config", str(chars)]
                    run_id = f"{cell.key}_{transport}_s{seed}"
                    t0 = time.perf_counter()
                    run_dir, err = run(out, run_id, cell.env_id, [*common, *backend], env)
                    if err:
                        print(f"{run_id}: {err}", file=sys.stderr)
                        continue
                    m = {"seed": seed, "run_dir": str(run_dir), **measure(run_dir)}
                    for base in ("offline", "random"):  # same settings, at the LLM run's episode count
                        plain = common[: len(common) - len(cell.extra)]  # --evidence, --rules-refine are the model's
                        # one baseline per transport: each at the episode count of its own transport's LLM run
                        b_dir, b_err = run(out, f"{cell.key}_{transport}_{base}_s{seed}", cell.env_id,
                                           [*plain, "--backend", base, "--max-episodes", str(m["episodes"])], env)
                        m[base] = None if b_err else json.loads((b_dir / "summary.json").read_text())["best_eval_mean"]
                    row["runs"].append(m)
                    print(f"{run_id}: valid {m['valid_first']}/{m['candidates']} first, held-out {m['heldout']:.3f} "
                          f"(initial {m['initial']:.3f}, offline {_fmt(m['offline'])}, random {_fmt(m['random'])}), "
                          f"{m['calls']} calls, {_fmt(m['s_per_call'], 1)} s/call "
                          f"[{time.perf_counter() - t0:.0f} s]", flush=True)
                (out / "results.json").write_text(json.dumps(rows, indent=1))
    finally:
        for s in servers.values():
            s.stop()
    table = markdown(rows)
    (out / "results.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
