"""The layer above every app: the rollout engine (what a tick decides, with the judge) and the
gateway snapshot (built from every app's rows, published to Redis)."""
