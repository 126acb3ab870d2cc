"""What the gateway measures of every request: Prometheus metrics and one record on a stream.

The records are the judge's raw material (per-request TTFT, TPOT, tokens, outcome, arm), so they
are compact JSON on a Redis stream of bounded length, written after the response is complete and
never on the client's critical path. The metrics are served on a listener of their own
(gateway.metrics_listener), not on the port tenants use.
"""

from __future__ import annotations

import functools
import logging

from prometheus_client import Counter, Gauge, Histogram

from gateway.sample import Sample

logger = logging.getLogger("gateway.measure")

LABELS = ("route", "arm", "deployment", "tenant")
# Finer than vLLM's buckets at the low end: the judge compares arms a few ms apart.
TTFT_BUCKETS = (
    0.005, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
    0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 60.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
    0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0,
)  # fmt: skip
E2E_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120, 300, 600)
OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1)

REQUESTS = Counter(
    "tollgate_gateway_requests",
    "Requests proxied, by outcome.",
    (*LABELS, "status", "finish_reason"),
)
TTFT = Histogram(
    "tollgate_gateway_ttft_seconds", "Time to first token.", LABELS, buckets=TTFT_BUCKETS
)
TPOT = Histogram(
    "tollgate_gateway_tpot_seconds",
    "Time per output token after the first.",
    LABELS,
    buckets=TPOT_BUCKETS,
)
E2E = Histogram(
    "tollgate_gateway_e2e_seconds", "End-to-end request latency.", LABELS, buckets=E2E_BUCKETS
)
TOKENS = Counter(
    "tollgate_gateway_tokens", "Tokens by direction (prompt, output).", (*LABELS, "direction")
)
TOOL_CALLS = Counter(
    "tollgate_gateway_tool_calls", "Requests with tools, by outcome.", (*LABELS, "outcome")
)
REJECTIONS = Counter(
    "tollgate_gateway_rejections",
    "Requests refused before reaching a replica.",
    ("route", "tenant", "reason"),
)
OVERHEAD = Histogram(
    "tollgate_gateway_overhead_seconds",
    "Time the gateway spends on a request before sending it upstream.",
    buckets=OVERHEAD_BUCKETS,
)
LOOP_STALLS = Counter(
    "tollgate_gateway_loop_stalls",
    "Times the event loop was held over 5 ms by one piece of work (gateway.watchdog).",
)
LOOP_STALL_SECONDS = Histogram(
    "tollgate_gateway_loop_stall_seconds",
    "How long each loop stall over 5 ms lasted.",
    buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
IN_FLIGHT = Gauge("tollgate_gateway_in_flight", "Requests in flight.", multiprocess_mode="livesum")


class _Children:
    """A label set's metric children, looked up once: `labels()` validates and locks on every
    call, which on every request's path adds up."""

    __slots__ = ("e2e", "output", "prompt", "tpot", "ttft")

    def __init__(self, labels: tuple[str, str, str, str]) -> None:
        self.e2e = E2E.labels(*labels)
        self.ttft = TTFT.labels(*labels)
        self.tpot = TPOT.labels(*labels)
        self.prompt = TOKENS.labels(*labels, "prompt")
        self.output = TOKENS.labels(*labels, "output")


@functools.cache
def _children(route: str, arm: str, dep: str, tenant: str) -> _Children:
    return _Children((route, arm, dep, tenant))


@functools.cache
def _requests(route: str, arm: str, dep: str, tenant: str, status: int, finish: str) -> Counter:
    return REQUESTS.labels(route, arm, dep, tenant, str(status), finish)


def observe(sample: Sample) -> None:
    labels = (sample.route, sample.arm, sample.dep, sample.tenant)
    _requests(*labels, sample.status, sample.finish or "none").inc()
    children = _children(*labels)
    children.e2e.observe(sample.e2e_ms / 1000)
    if sample.ttft_ms is not None:
        children.ttft.observe(sample.ttft_ms / 1000)
    if sample.tpot_ms is not None:
        children.tpot.observe(sample.tpot_ms / 1000)
    children.prompt.inc(sample.pt)
    children.output.inc(sample.ot)
    if sample.tool is not None:
        TOOL_CALLS.labels(*labels, sample.tool).inc()
