from __future__ import annotations

from django import forms

from registry.choices import ArtifactFormat


class ArtifactFilterForm(forms.Form):
    """The list's search box and filters, read from the query string."""

    q = forms.CharField(required=False, max_length=200)
    family = forms.SlugField(required=False, max_length=100)
    alias = forms.SlugField(required=False, max_length=63)
    format = forms.ChoiceField(required=False, choices=[("", "any"), *ArtifactFormat.choices])


class AliasMoveForm(forms.Form):
    name = forms.SlugField(
        max_length=63,
        label="Alias",
        error_messages={"required": "Name the alias to move (production, candidate, …)."},
    )
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea,
        error_messages={"required": "Say why the alias moves: the reason is kept in its history."},
    )
    # The version the alias pointed at when the confirmation was shown ("" for a new alias): the
    # move is refused if it has moved since, so nobody confirms a change they were not shown.
    expected = forms.CharField(required=False, max_length=100)
