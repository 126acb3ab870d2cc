"""A replica unlike its siblings, set aside before the arms are compared.

Every replica of a deployment runs the same model with the same settings, so when one of them is
much slower (or faster) than its siblings, the difference is the host's (a noisy neighbour, a
throttled GPU, a bad disk), not the model's. Compared as it is, such a replica moves its arm's
latency by a quarter of its own difference (with four replicas an arm) and, worse, makes the arm's
replicas disagree: the replica-level variance then leaves every latency metric unresolved and the
rollout waits for a person. So before each comparison the judge looks for one replica per arm
whose median TTFT or TPOT differs from its siblings' beyond `ODD_BY`, shown at `ODD_Z` standard
errors (its own, and the spread of the siblings' medians: where every replica drifts, the
furthest is no outlier), and judges that arm without it; the report says which and by how much,
so that a person can look at the host. Only latencies are judged without it: its errors, lengths
and tool calls still count, and a replica odd in one arm is left out of every arm (one host may
serve both).

A regression of the model moves every replica of the candidate alike, so it is never set aside:
only a disagreement within one deployment is. At most one replica an arm is set aside, and only
where at least three siblings remain to agree on what the deployment does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from evaluation.judge.estimators import WINDOW_S, Clusters, SortedSample, compare
from evaluation.judge.samples import ArmSamples
from evaluation.judge.signals import served

# A replica this much slower or faster than its siblings is a host's problem worth a look.
ODD_BY = 0.15
# ...shown at this many standard errors, so that chance sets one aside rarely (and a replica set
# aside by chance costs the arm a quarter of its samples, not its correctness).
ODD_Z = 4.0
MIN_SIBLINGS = 3
MIN_PER_REPLICA = 100
COLUMNS = (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"))


@dataclass(frozen=True)
class OddReplica:
    arm: str  # baseline, control or candidate
    replica: str
    column: str  # what showed it: "TTFT" or "TPOT"
    difference: float  # relative: +0.25 is 25% slower than its siblings' median
    siblings: int

    def describe(self) -> str:
        return (
            f"{self.arm} replica {self.replica}: median {self.column} {self.difference:+.0%} "
            f"against its {self.siblings} siblings (the same model: the host, not the model), "
            f"judged without it"
        )


def odd_replica(arm: ArmSamples, name: str) -> OddReplica | None:
    """The replica of `arm` most unlike its siblings, where one is beyond `ODD_BY` at `ODD_Z`."""
    names, codes = np.unique(arm.replica, return_inverse=True)
    named = codes != 0 if names[:1].tolist() == [""] else np.ones(len(arm), dtype=bool)
    # By time window only: a replica-level term would read the very difference looked for as
    # noise.
    _, window = np.unique(np.floor(arm.ts / WINDOW_S).astype(np.int64), return_inverse=True)
    clusters = Clusters(window, np.zeros(len(arm), dtype=np.int64), int(window.max(initial=0)) + 1)
    found: tuple[float, OddReplica] | None = None
    for column, label in COLUMNS:
        values = np.asarray(getattr(arm, column), dtype=np.float64)
        usable = served(arm) & named & np.isfinite(values)
        counts = np.bincount(codes[usable], minlength=len(names))
        enough = np.flatnonzero(counts >= MIN_PER_REPLICA)
        if len(enough) < MIN_SIBLINGS + 1:
            continue
        # Only the replica furthest from the others' typical median can be the odd one.
        logs = np.log(np.maximum(values, 1e-6))
        medians = np.array([np.median(logs[usable & (codes == code)]) for code in enough])
        furthest = int(np.argmax(np.abs(medians - np.median(medians))))
        code = int(enough[furthest])
        mine, others = usable & (codes == code), usable & (codes != code)
        estimate = compare(
            SortedSample.of(values[others], clusters[others]).quantile(0.5),
            SortedSample.of(values[mine], clusters[mine]).quantile(0.5),
        )
        # Measured against how much the siblings differ among themselves: where every replica
        # drifts, the furthest of four is no host's fault, and setting it aside would leave its
        # arm's replicas agreeing more than replicas do, which the replica-level variance then
        # reads as precision.
        siblings_spread = float(np.std(np.delete(medians, furthest), ddof=1))
        beyond = abs(estimate.theta) - ODD_Z * math.hypot(estimate.se, siblings_spread)
        if beyond > math.log1p(ODD_BY) and (found is None or beyond > found[0]):
            siblings = len(np.unique(codes[others]))
            odd = OddReplica(name, str(names[code]), label, math.expm1(estimate.theta), siblings)
            found = (beyond, odd)
    return found[1] if found else None


def without(arm: ArmSamples, replicas: set[str]) -> ArmSamples:
    return arm.take(~np.isin(arm.replica, sorted(replicas))) if replicas else arm
