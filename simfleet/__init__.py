"""A simulated vLLM fleet for development, demo and CI (imports no Django)."""
