"""`python -m simfleet`: a simulated vLLM fleet. See simfleet/profiles.py for the YAML schema."""

from __future__ import annotations

import argparse
import logging
import os
import resource
import socket
import sys
from pathlib import Path

import uvloop

from simfleet.profiles import (
    BUILTIN_PROFILES,
    ConfigError,
    FleetConfig,
    load_config,
    uniform_fleet,
)
from simfleet.server import serve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simfleet", description=__doc__)
    parser.add_argument("--config", type=Path, help="fleet YAML (overrides the flags below)")
    parser.add_argument("--replicas", type=int, default=2, help="number of replicas (default 2)")
    parser.add_argument("--base-port", type=int, default=9101, help="first port (default 9101)")
    parser.add_argument("--host", default=os.environ.get("SIMFLEET_HOST") or "127.0.0.1")
    parser.add_argument(
        "--profile", choices=sorted(BUILTIN_PROFILES), default="cpu-tiny", help="model profile"
    )
    parser.add_argument("--model", help="served model name (default: the profile's)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    # Each stream is a socket: serving thousands needs more than the usual 1,024 descriptors.
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        if args.config is not None:
            config = load_config(args.config)
        else:
            if not 1 <= args.replicas <= 64:
                raise ConfigError("--replicas must be between 1 and 64")
            profile = BUILTIN_PROFILES[args.profile]
            if args.model:
                profile = profile.model_copy(update={"name": args.model})
            config = uniform_fleet(
                replicas=args.replicas,
                base_port=args.base_port,
                profile=profile,
                seed=args.seed,
                host=args.host,
            )
        _check_ports_free(config)
        uvloop.run(serve(config))
    except ConfigError as exc:
        print(f"simfleet: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    except OSError as exc:
        print(f"simfleet: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    return 0


def _check_ports_free(config: FleetConfig) -> None:
    """One clear line for a port already taken (another fleet, a running demo), before any
    replica starts, rather than a traceback per replica from the server."""
    for spec in config.replicas:
        with socket.socket(socket.AF_INET6 if ":" in config.host else socket.AF_INET) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
            try:
                probe.bind((config.host, spec.port))
            except OSError as exc:
                raise ConfigError(
                    f"port {spec.port} on {config.host} is in use ({exc.strerror}); choose free "
                    "ports (--base-port, or the replicas' ports in --config)"
                ) from exc


if __name__ == "__main__":
    sys.exit(main())
