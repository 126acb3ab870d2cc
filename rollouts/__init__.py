"""Fleets, deployments, routes and the staged canary engine."""
