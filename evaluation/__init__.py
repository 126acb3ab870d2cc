"""The A/B judge: per-request samples, LLM serving metrics and their statistics."""
