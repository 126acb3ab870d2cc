"""The lineage graph's layout: levels by depth, wide levels cut, lines running downwards."""

from __future__ import annotations

from registry.graph import MAX_LABEL, MAX_PER_LEVEL, Graph, layout
from registry.models import ModelArtifact
from registry.selectors import Edge, Lineage


def artifacts(*labels: str) -> dict[str, ModelArtifact]:
    made = {}
    for pk, label in enumerate(labels, start=1):
        family, _, version = label.partition(":")
        made[label] = ModelArtifact(pk=pk, family=family, version=version, format="safetensors")
    return made


def draw(
    root: ModelArtifact,
    every: dict[str, ModelArtifact],
    up: list[Edge],
    down: list[Edge],
    aliases: dict[int, list[str]] | None = None,
) -> Graph:
    rows = {a.pk: a for a in every.values()}
    return layout(
        Lineage(root=root, ancestors=up, descendants=down, artifacts=rows),
        aliases=lambda drawn: {pk: names for pk, names in (aliases or {}).items() if pk in drawn},
        href=lambda a: f"/registry/{a.family}/{a.version}/",
    )


def test_a_merge_puts_the_shared_ancestor_above_its_longest_path() -> None:
    # m merges a and b; a derives from base, and b from a: base must sit above both.
    a = artifacts("x:m", "x:a", "x:b", "x:base")
    up = [
        Edge(a["x:m"].pk, a["x:a"].pk, "merge", 1),
        Edge(a["x:m"].pk, a["x:b"].pk, "merge", 1),
        Edge(a["x:b"].pk, a["x:a"].pk, "finetune", 2),
        Edge(a["x:a"].pk, a["x:base"].pk, "finetune", 2),
        Edge(a["x:a"].pk, a["x:base"].pk, "finetune", 3),
    ]
    graph = draw(a["x:m"], a, up, [])
    y = {box.title: box.y for box in graph.boxes}
    assert y["x:base"] < y["x:a"] < y["x:b"] < y["x:m"]
    assert all(line.y1 < line.y2 for line in graph.lines)
    assert sorted(line.relation for line in graph.lines) == [
        "fine-tune",
        "fine-tune",
        "merge",
        "merge",
    ]


def test_a_wide_level_is_cut_with_a_count_of_the_rest() -> None:
    labels = ["base:1", *(f"ft:{n}" for n in range(30))]
    a = artifacts(*labels)
    down = [Edge(a[f"ft:{n}"].pk, a["base:1"].pk, "adapter", 1) for n in range(30)]
    graph = draw(a["base:1"], a, [], down)
    drawn = [box for box in graph.boxes if box.artifact_id is not None]
    assert len(drawn) == 1 + MAX_PER_LEVEL - 1
    more = graph.boxes[-1]
    assert (more.label, more.href) == (f"+{30 - MAX_PER_LEVEL + 1} more", "")
    assert len(graph.lines) == MAX_PER_LEVEL - 1
    assert max(box.x for box in graph.boxes) + 200 < graph.width


def test_boxes_carry_links_alias_tags_and_shortened_labels() -> None:
    a = artifacts("support-chat:v1", "a-very-long-family-name-indeed:2026-11-30")
    long = a["a-very-long-family-name-indeed:2026-11-30"]
    up = [Edge(a["support-chat:v1"].pk, long.pk, "distilled", 1)]
    graph = draw(a["support-chat:v1"], a, up, [], aliases={long.pk: ["candidate", "production"]})
    parent, root = graph.boxes
    assert root.root
    assert parent.production
    assert [tag.name for tag in parent.tags] == ["production", "candidate"]
    assert parent.label.endswith("…")
    assert len(parent.label) == MAX_LABEL
    assert parent.title == "a-very-long-family-name-indeed:2026-11-30"
    assert parent.href == "/registry/a-very-long-family-name-indeed/2026-11-30/"
    assert graph.lines[0].relation == "distilled"
