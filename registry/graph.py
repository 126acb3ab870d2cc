"""Lays out an artifact's lineage for the SVG on its page: ancestors above, descendants below.

Each artifact sits on the level of its longest path from the page's artifact, so every line runs
downwards from parent to child. Within a level, boxes are ordered by where their neighbours on the
level nearer the artifact sit (one barycentre pass outwards), and placed as near above or below
them as their neighbours on the level allow, which keeps most lines short and uncrossed without a
layout library. Wide levels are cut to `MAX_PER_LEVEL` boxes and a "+N more" box: a
base model with hundreds of fine-tunes must not produce a graph thousands of pixels wide, and six
boxes still fit a page at a legible size.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from registry.choices import Relation
from registry.selectors import Edge, Lineage, Named

BOX_WIDTH = 200
BOX_HEIGHT = 44
H_GAP = 32
# Room between levels for the relation label and the alias tags that sit on a box's top edge.
V_GAP = 76
PAD = 24
MAX_PER_LEVEL = 6
MAX_LABEL = 24
MAX_TAGS = 3
TAG_HEIGHT = 16
TAG_CHAR_WIDTH = 6.4


@dataclass(frozen=True)
class Tag:
    """An alias name on a box's top edge."""

    name: str
    x: float
    y: float
    width: float
    production: bool
    height: int = TAG_HEIGHT

    @property
    def cx(self) -> float:
        return round(self.x + self.width / 2, 1)

    @property
    def text_y(self) -> float:
        return self.y + self.height / 2


@dataclass(frozen=True)
class Box:
    artifact_id: int | None  # None for the "+N more" box of a cut level
    label: str  # as drawn, maybe shortened
    title: str  # in full, as the box's tooltip
    detail: str
    href: str
    x: float
    y: float
    root: bool = False
    production: bool = False
    tags: list[Tag] = field(default_factory=list)
    width: int = BOX_WIDTH
    height: int = BOX_HEIGHT

    @property
    def cx(self) -> float:
        return self.x + self.width / 2

    @property
    def label_y(self) -> float:
        return self.y + (18 if self.detail else self.height / 2)

    @property
    def detail_y(self) -> float:
        return self.y + 34


@dataclass(frozen=True)
class Line:
    x1: float
    y1: float
    x2: float
    y2: float
    relation: str

    @property
    def label_x(self) -> float:
        return (self.x1 + self.x2) / 2

    @property
    def label_y(self) -> float:
        return (self.y1 + self.y2) / 2


@dataclass(frozen=True)
class Graph:
    width: float
    height: float
    boxes: list[Box]
    lines: list[Line]

    @property
    def alone(self) -> bool:
        return len(self.boxes) == 1


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _levels(lineage: Lineage) -> dict[int, int]:
    """Level of each artifact: 0 for the page's artifact, -depth above, +depth below."""
    levels = {lineage.root.pk: 0}
    for edge in lineage.ancestors:
        if edge.parent_id != lineage.root.pk:
            levels[edge.parent_id] = min(levels.get(edge.parent_id, 0), -edge.depth)
    for edge in lineage.descendants:
        # A cycle (forbidden on write, survivable on read) could list an ancestor here too;
        # it keeps its place above.
        if levels.get(edge.child_id, 0) >= 0 and edge.child_id != lineage.root.pk:
            levels[edge.child_id] = max(levels.get(edge.child_id, 0), edge.depth)
    return levels


def _relation_label(relation: str) -> str:
    return Relation(relation).label if relation in Relation.values else relation


def layout(
    lineage: Lineage,
    *,
    aliases: Callable[[set[int]], dict[int, list[str]]],
    href: Callable[[Named], str],
) -> Graph:
    """`aliases` reads the alias names pointing at the artifacts drawn (any family's), by id:
    it is called once, with only the boxes that made the cut."""
    levels = _levels(lineage)
    edges: dict[tuple[int, int], Edge] = {}
    for edge in [*lineage.ancestors, *lineage.descendants]:
        edges.setdefault((edge.child_id, edge.parent_id), edge)
    # Neighbours on the level nearer the root: children for ancestors, parents for descendants.
    nearer: dict[int, list[int]] = defaultdict(list)
    for child_id, parent_id in edges:
        if levels.get(parent_id, 0) < 0:
            nearer[parent_id].append(child_id)
        if levels.get(child_id, 0) > 0:
            nearer[child_id].append(parent_id)

    labels = {pk: str(artifact) for pk, artifact in lineage.artifacts.items()}

    def label(artifact_id: int) -> str:
        return labels.get(artifact_id, f"#{artifact_id}")

    by_level: dict[int, list[int]] = defaultdict(list)
    for artifact_id, level in levels.items():
        by_level[level].append(artifact_id)
    centre: dict[int, float] = {lineage.root.pk: 0.0}
    rows: dict[int, tuple[list[int], int, float]] = {0: ([lineage.root.pk], 0, 0.0)}
    for direction in (-1, 1):
        level = direction
        while level in by_level:
            wanted = {
                n: _mean([centre[m] for m in nearer[n] if m in centre]) for n in by_level[level]
            }
            ordered = [
                artifact_id
                for _, _, artifact_id in sorted(
                    (math.inf if where is None else where, label(artifact_id), artifact_id)
                    for artifact_id, where in wanted.items()
                )
            ]
            hidden = 0
            if len(ordered) > MAX_PER_LEVEL:
                hidden = len(ordered) - (MAX_PER_LEVEL - 1)
                ordered = ordered[: MAX_PER_LEVEL - 1]
            slots = _place([wanted[n] for n in ordered] + ([None] if hidden else []))
            centre.update(zip(ordered, slots, strict=False))
            rows[level] = (ordered, hidden, slots[-1])
            level += direction

    top = min(rows)
    left = min(centre.values())
    right = max([*centre.values(), *(more for _, hidden, more in rows.values() if hidden)])
    width = right - left + BOX_WIDTH + 2 * PAD
    height = (max(rows) - top + 1) * (BOX_HEIGHT + V_GAP) - V_GAP + 2 * PAD

    def box_x(centre_x: float) -> float:
        return round(PAD + centre_x - left, 1)

    def box_y(level: int) -> float:
        return PAD + (level - top) * (BOX_HEIGHT + V_GAP)

    tags = aliases({artifact_id for ids, _, _ in rows.values() for artifact_id in ids})
    boxes: dict[int, Box] = {}
    more: list[Box] = []
    for level, (ids, hidden, more_centre) in rows.items():
        for artifact_id in ids:
            artifact = lineage.artifacts.get(artifact_id)
            names = sorted(tags.get(artifact_id, []), key=lambda n: (n != "production", n))
            x, y = box_x(centre[artifact_id]), box_y(level)
            boxes[artifact_id] = Box(
                artifact_id=artifact_id,
                label=_shorten(label(artifact_id), MAX_LABEL),
                title=label(artifact_id),
                detail=artifact.get_format_display() if artifact is not None else "",
                href=href(artifact) if artifact is not None else "",
                x=x,
                y=y,
                root=artifact_id == lineage.root.pk,
                production="production" in names,
                tags=list(_tags(names[:MAX_TAGS], x, y - TAG_HEIGHT / 2)),
            )
        if hidden:
            more.append(
                Box(
                    artifact_id=None,
                    label=f"+{hidden} more",
                    title=f"{hidden} more artifacts on this level are not drawn",
                    detail="",
                    href="",
                    x=box_x(more_centre),
                    y=box_y(level),
                )
            )
    lines = [
        Line(
            x1=boxes[parent_id].cx,
            y1=boxes[parent_id].y + BOX_HEIGHT,
            x2=boxes[child_id].cx,
            y2=boxes[child_id].y,
            relation=_relation_label(edge.relation),
        )
        for (child_id, parent_id), edge in edges.items()
        if child_id in boxes and parent_id in boxes
    ]
    ordered_boxes = sorted(boxes.values(), key=lambda b: (b.y, b.x)) + more
    return Graph(width=width, height=height, boxes=ordered_boxes, lines=lines)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _place(wanted: list[float | None]) -> list[float]:
    """Centres for one level's boxes, in order: each as near its wanted place (over its
    neighbours) as the boxes to its left allow, then the row shifted so that on average the
    boxes sit where they want. Boxes that want no place go after the others."""
    pitch = BOX_WIDTH + H_GAP
    placed: list[float] = []
    for where in wanted:
        floor = placed[-1] + pitch if placed else -math.inf
        placed.append(max(where if where is not None else floor, floor))
    if math.isinf(placed[0]):
        placed = [index * pitch for index in range(len(placed))]
    targets = [(at, where) for at, where in zip(placed, wanted, strict=True) if where is not None]
    if targets:
        shift = sum(where - at for at, where in targets) / len(targets)
    else:
        shift = -(placed[0] + placed[-1]) / 2
    return [at + shift for at in placed]


def _tags(names: Iterable[str], box_x: float, y: float) -> Iterable[Tag]:
    """Alias tags on the box's top edge, left to right, production first."""
    x = box_x + 8
    for name in names:
        width = round(len(name) * TAG_CHAR_WIDTH + 12, 1)
        yield Tag(name=name, x=x, y=y, width=width, production=name == "production")
        x += width + 4
