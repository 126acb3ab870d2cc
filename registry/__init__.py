"""Model registry: artifacts, lineage, eval scores, aliases and promotion gates."""
