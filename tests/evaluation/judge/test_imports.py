"""The statistical core stands alone: no Django, so it can be tested and reused on its own."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_importing_the_judge_pulls_in_no_django_module() -> None:
    script = (
        "import sys, evaluation.judge, evaluation.judge.core;"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'));"
        "print(','.join(loaded))"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
    # The check can fail: the same script sees Django once something imports it.
    leaky = script.replace("import sys,", "import sys, django.conf,")
    leaked = subprocess.run(
        [sys.executable, "-c", leaky], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "django" in leaked.stdout
