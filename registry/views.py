"""The registry's pages: the artifact list, an artifact's page (lineage graph, evals, gates and
aliases) and moving an alias. Every signed-in role reads the registry; only release managers move
aliases.

Each view renders the whole page, or with htmx only the fragment (a template partial) it swaps.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Q
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers
from django_htmx.http import reswap, retarget

from core.errors import Conflict, DomainError
from registry import graph, selectors, services
from registry.choices import ArtifactFormat
from registry.forms import AliasMoveForm, ArtifactFilterForm
from registry.models import Alias, AliasMove, ModelArtifact
from tenants.web import SignedInRequest, release_manager, wants_fragment

PAGE_SIZE = 50
HISTORY_LIMIT = 50
# The graph shows this many generations either way; deeper history is a click away on the
# farthest box drawn. The cap keeps the drawing readable: for an artifact in the middle of the
# 10,000-artifact benchmark, four generations make 9 levels (1,050 px tall), eight make 17 levels
# (2,000 px) and the whole lineage 32 (3,800 px). It also keeps the page quick: the walk stops in
# the query at this depth (selectors.NEAR_DEPTH), ~7 ms at 4, ~16 ms at 6, ~55 ms at 8, where the
# whole lineage (7,700 artifacts, 22,000 edges) takes ~270 ms.
GRAPH_DEPTH = 4


def artifact_url(artifact: selectors.Named) -> str:
    return reverse("registry:artifact-detail", args=[artifact.family, artifact.version])


# --- the list -------------------------------------------------------------------------------------


def _alias_names() -> list[str]:
    # Not in selectors.py: only the list's alias filter needs the names in use.
    return list(Alias.objects.values_list("name", flat=True).distinct().order_by("name"))


@require_GET
@login_required
@vary_on_headers("HX-Request")
def artifact_list(request: SignedInRequest) -> HttpResponse:
    """Search and filters refresh only the rows (and the pager) with htmx; without JS the same
    form is a plain GET of this URL."""
    form = ArtifactFilterForm(request.GET)
    form.is_valid()  # an invalid filter is dropped and flagged; the valid ones still apply
    filters = form.cleaned_data
    queryset = selectors.artifact_list(
        search=filters.get("q", ""),
        family=filters.get("family", ""),
        alias=filters.get("alias", ""),
        format=filters.get("format", ""),
    )
    page = Paginator(queryset, PAGE_SIZE).get_page(request.GET.get("page"))
    context: dict[str, Any] = {"form": form, "page": page}
    template = "registry/artifact_list.html"
    if wants_fragment(request):
        template += "#artifact-rows"
    else:
        context |= {
            "families": selectors.families(),
            "alias_names": _alias_names(),
            "formats": ArtifactFormat.choices,
        }
    return render(request, template, context)


# --- an artifact's page ---------------------------------------------------------------------------


def _artifact_or_404(family: str, version: str) -> ModelArtifact:
    artifact = (
        ModelArtifact.objects.select_related("created_by")
        .filter(family=family, version=version)
        .first()
    )
    if artifact is None:
        raise Http404(f"no artifact {family}:{version} is registered")
    return artifact


def _page_context(artifact: ModelArtifact) -> dict[str, Any]:
    lineage = selectors.lineage(artifact, max_depth=GRAPH_DEPTH)
    # One read for three uses: the tags of the boxes drawn (any family), this family's current
    # aliases, and the names the move form offers. The layout calls it with only the boxes it
    # draws: a dense lineage reaches thousands of artifacts, a level shows six.
    aliases: list[Alias] = []

    def read_aliases(drawn: set[int]) -> dict[int, list[str]]:
        aliases.extend(
            Alias.objects.filter(Q(artifact_id__in=drawn) | Q(family=artifact.family))
            .select_related("artifact")
            .order_by("name")
        )
        by_artifact: dict[int, list[str]] = defaultdict(list)
        for alias in aliases:
            by_artifact[alias.artifact_id].append(alias.name)
        return by_artifact

    drawn = graph.layout(lineage, aliases=read_aliases, href=artifact_url)
    badges = [alias.name for alias in aliases if alias.artifact_id == artifact.pk]
    family_aliases = [alias for alias in aliases if alias.family == artifact.family]
    history = (
        AliasMove.objects.filter(family=artifact.family)
        .select_related("from_artifact", "to_artifact")
        .order_by("-created_at", "-id")[:HISTORY_LIMIT]
    )
    return {
        "artifact": artifact,
        "badges": sorted(badges, key=lambda n: (n != "production", n)),
        "graph": drawn,
        "graph_depth": GRAPH_DEPTH,
        "graph_cut": any(
            e.depth >= GRAPH_DEPTH for e in [*lineage.ancestors, *lineage.descendants]
        ),
        "comparison": selectors.score_comparison(artifact),
        "is_production": "production" in badges,
        "gates": selectors.gates_check(artifact),
        "family_aliases": family_aliases,
        "alias_names": [alias.name for alias in family_aliases],
        "history": list(history),
    }


@require_GET
@login_required
def artifact_detail(request: SignedInRequest, family: str, version: str) -> HttpResponse:
    artifact = _artifact_or_404(family, version)
    context = _page_context(artifact)
    can_move = request.user.is_release_manager
    context |= {"can_move": can_move, "move_form": AliasMoveForm(), "step": "form"}
    return render(request, "registry/artifact_detail.html", context)


@require_POST
@login_required
def alias_move(request: SignedInRequest, family: str, version: str) -> HttpResponse:
    """Two posts: the first shows the change to confirm, the second (with `confirm`) makes it."""
    actor = release_manager(request, to="move aliases")
    artifact = _artifact_or_404(family, version)
    form = AliasMoveForm(request.POST)
    step = "form"
    current: ModelArtifact | None = None
    if form.is_valid():
        name = form.cleaned_data["name"]
        current = selectors.alias_target(family, name)
        shown = current.version if current is not None else ""
        if request.POST.get("confirm") != "yes":
            step = "confirm"
        elif form.cleaned_data["expected"] != shown:
            # The alias moved between the confirmation and this post: confirm again.
            step = "confirm"
            form.add_error(None, f"{family}@{name} has moved since you looked: check the change.")
        else:
            try:
                # Compare-and-set under the service's lock: closes the gap after the check above.
                services.alias_move(
                    actor=actor,
                    family=family,
                    name=name,
                    artifact=artifact,
                    reason=form.cleaned_data["reason"],
                    expected_from=current,
                )
            except DomainError as exc:
                step = "confirm" if isinstance(exc, Conflict) else step
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"{family}@{name} now points at {artifact}.")
                if not wants_fragment(request):
                    return redirect(artifact_url(artifact))
                # Badges, graph, deltas against production and history all change: swap the
                # whole page body in place.
                context = _page_context(artifact)
                context |= {"can_move": True, "move_form": AliasMoveForm(), "step": "form"}
                response = render(request, "registry/artifact_detail.html#artifact-page", context)
                return reswap(retarget(response, "#artifact-page"), "outerHTML")
    move = {
        "can_move": True,
        "move_form": form,
        "step": step,
        "current": current,
        "unchanged": current is not None and current.pk == artifact.pk,
    }
    if wants_fragment(request):
        context = {
            "artifact": artifact,
            "alias_names": list(Alias.objects.filter(family=family).values_list("name", flat=True)),
            **move,
        }
        return render(request, "registry/artifact_detail.html#alias-move", context)
    return render(request, "registry/artifact_detail.html", _page_context(artifact) | move)
