"""Registry pages and API calls at scale: server time at p50/p95 and query counts.

    .venv/bin/python bench/registry_pages.py [--artifacts 10000] [--requests 200]
        [--keep] [--reuse] [--only SUBSTRING]

Builds a registry of its own in a separate database (`tollgate_bench`, created and dropped here):
10,000 artifacts in 100 families, 30,000 lineage edges (each artifact derives from up to three
earlier ones, plus a 60-generation chain), 200,000 eval scores and production aliases. Then it
times, in-process with Django's test client (server time: middleware, view, queries, template),
the artifact list page and API (page 1, a filtered page, a search: `q` on the page, `search` in
the API), the artifact page and its API calls (detail, lineage, eval comparison), and a
50-generation lineage walk, and prints p50/p95 next to the 100 ms target with each call's query
count.

`--keep` leaves the database in place afterwards and `--reuse` measures a kept one again (after
applying any new migration), which saves the build while trying out a change; `--only` times the
calls whose name contains the given text.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATABASE = "tollgate_bench"
os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
os.environ.setdefault("SECRET_KEY", "bench-secret-key-0123456789-0123456789-0123456789")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
os.environ["LOG_LEVEL"] = "WARNING"

import django  # noqa: E402
import psycopg  # noqa: E402


def reset_database() -> None:
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DATABASE}"')


def database_exists() -> bool:
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as conn:
        row = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
    return row is not None


def reuse() -> dict[str, object]:
    """The figures and sample artifacts of a database that an earlier `--keep` run built."""
    from django.core.management import call_command
    from django.db import connection

    from registry.models import EvalScore, LineageEdge, ModelArtifact

    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    ids = list(ModelArtifact.objects.order_by("pk").values_list("pk", flat=True))
    return {
        "artifacts": len(ids),
        "edges": LineageEdge.objects.count(),
        "scores": EvalScore.objects.count(),
        "deep": ModelArtifact.objects.get(pk=ids[60]),
        "sample": ModelArtifact.objects.get(pk=ids[len(ids) // 2]),
    }


def build(artifact_count: int) -> dict[str, object]:
    from django.core.management import call_command
    from django.db import connection

    from registry.models import (
        Alias,
        EvalRun,
        EvalScore,
        LineageEdge,
        ModelArtifact,
    )

    call_command("migrate", verbosity=0)
    rng = random.Random(7)
    families = [f"family-{i:03d}" for i in range(100)]
    formats = ["safetensors", "gguf", "lora_adapter"]
    artifacts = ModelArtifact.objects.bulk_create(
        ModelArtifact(
            family=families[i % len(families)],
            version=f"v{i // len(families)}",
            uri=f"s3://models/{families[i % len(families)]}/v{i // len(families)}",
            digest=f"{i:064x}",
            format=formats[i % 3],
        )
        for i in range(artifact_count)
    )
    edges: list[LineageEdge] = []
    relations = ["finetune", "adapter", "quantized", "merge", "distilled"]
    chain = artifacts[:61]
    for parent, child in itertools.pairwise(chain):
        edges.append(LineageEdge(child=child, parent=parent, relation="finetune"))
    seen = {(e.child_id, e.parent_id) for e in edges}
    for index in range(61, artifact_count):
        for _ in range(3):
            parent = artifacts[rng.randrange(max(1, index - 500), index)]
            key = (artifacts[index].pk, parent.pk)
            if key not in seen:
                seen.add(key)
                edges.append(
                    LineageEdge(
                        child=artifacts[index], parent=parent, relation=rng.choice(relations)
                    )
                )
    LineageEdge.objects.bulk_create(edges, batch_size=5000)
    runs = EvalRun.objects.bulk_create(
        EvalRun(artifact=a, source="lm_eval", suite="lm-evaluation-harness") for a in artifacts
    )
    tasks = [f"task_{t:02d}" for t in range(20)]
    EvalScore.objects.bulk_create(
        (
            EvalScore(
                run=run,
                task=task,
                metric="acc",
                value=rng.random(),
                stderr=0.01,
                higher_is_better=True,
            )
            for run in runs
            for task in tasks
        ),
        batch_size=10_000,
    )
    Alias.objects.bulk_create(
        Alias(family=f, name="production", artifact=artifacts[i]) for i, f in enumerate(families)
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")  # fresh statistics, as autovacuum would have by now
    return {
        "artifacts": ModelArtifact.objects.count(),
        "edges": LineageEdge.objects.count(),
        "scores": EvalScore.objects.count(),
        "deep": chain[60],
        "sample": artifacts[artifact_count // 2],
    }


def measure(client: object, url: str, requests: int) -> tuple[float, float, int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    get = client.get  # type: ignore[attr-defined]
    assert get(url).status_code == 200, url  # warm up caches and check the URL
    timings = []
    for _ in range(requests):
        started = time.perf_counter()
        response = get(url)
        timings.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    with CaptureQueriesContext(connection) as queries:
        get(url)
    timings.sort()
    return statistics.median(timings), timings[int(len(timings) * 0.95) - 1], len(queries)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--artifacts", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--keep", action="store_true", help="leave the database in place")
    parser.add_argument("--reuse", action="store_true", help="measure a kept database again")
    parser.add_argument("--only", default="", help="time only the calls whose name has this")
    args = parser.parse_args()
    reused = args.reuse and database_exists()
    if not reused:
        reset_database()
    django.setup()
    from django.conf import settings
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from registry.selectors import lineage
    from tenants.choices import Role
    from tenants.models import User

    settings.ALLOWED_HOSTS = ["testserver"]
    started = time.perf_counter()
    data = reuse() if reused else build(args.artifacts)
    print(
        f"{'reused' if reused else 'built'} {data['artifacts']} artifacts, {data['edges']} "
        f"lineage edges, {data['scores']} eval scores in {time.perf_counter() - started:.0f} s"
    )
    user, _ = User.objects.get_or_create(username="bench", defaults={"role": Role.VIEWER})
    client = Client()
    client.force_login(user)
    sample = data["sample"]
    path = f"{sample.family}/{sample.version}"  # type: ignore[attr-defined]
    calls = [
        ("list page", "/registry/"),
        ("list page, filtered", "/registry/?family=family-042&format=gguf"),
        ("list page, search", "/registry/?q=v42"),
        ("artifact page", f"/registry/{path}/"),
        ("API list", "/api/v1/registry/artifacts"),
        ("API list, filtered", "/api/v1/registry/artifacts?family=family-042&alias=production"),
        ("API list, search", "/api/v1/registry/artifacts?search=v42"),
        ("API detail", f"/api/v1/registry/artifacts/{path}"),
        ("API lineage", f"/api/v1/registry/artifacts/{path}/lineage"),
        ("API eval comparison", f"/api/v1/registry/artifacts/{path}/evals"),
    ]
    sample_walk = lineage(sample)  # type: ignore[arg-type]
    print(
        f"sample artifact {sample}: {len(sample_walk.ancestors)} ancestor and "
        f"{len(sample_walk.descendants)} descendant edges over {len(sample_walk.artifacts)} "
        f"artifacts; {args.requests} requests per call"
    )
    print(f"{'call':<24} {'p50 ms':>8} {'p95 ms':>8} {'queries':>8}  target p95 < 100 ms")
    over = []
    for name, url in calls:
        if args.only not in name:
            continue
        p50, p95, queries = measure(client, url, args.requests)
        verdict = "ok" if p95 < 100 else "OVER"
        over += [name] if p95 >= 100 else []
        print(f"{name:<24} {p50:8.1f} {p95:8.1f} {queries:8d}  {verdict}")
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        walk = lineage(data["deep"], max_depth=50)  # type: ignore[arg-type]
        walk_ms = (time.perf_counter() - started) * 1000
    depth = max(e.depth for e in walk.ancestors)
    walks = [q for q in captured.captured_queries if "RECURSIVE" in q["sql"]]
    print(
        f"lineage walk {depth} generations deep: {len(walks)} recursive "
        f"{'query' if len(walks) == 1 else 'queries'}, {len(captured)} in all with the rows, "
        f"{walk_ms:.1f} ms"
    )
    print(f"p95 over 100 ms: {', '.join(over)}" if over else "every call timed: p95 < 100 ms")
    connection.close()
    if not args.keep:
        with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{DATABASE}" WITH (FORCE)')


if __name__ == "__main__":
    main()
