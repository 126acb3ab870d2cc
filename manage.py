#!/usr/bin/env python
"""Tollgate's management entry point.

Configuration and connection problems end in one line on stderr that says what to fix, not in a
traceback: they are the operator's to fix, not the code's.
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")
    from django.core.management import execute_from_command_line

    from controlplane.env import ConfigError

    try:
        execute_from_command_line(sys.argv)
    except ConfigError as exc:
        sys.exit(f"tollgate: {exc}")
    except Exception as exc:
        from django.db import OperationalError

        if not isinstance(exc, OperationalError):
            raise
        from django.conf import settings

        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        sys.exit(
            f"tollgate: cannot use the database at {settings.DATABASE.redacted()} "
            f"(DATABASE_URL): {reason}"
        )


if __name__ == "__main__":
    main()
