"""Creating Tollgate's database on a fresh server, before Django can connect to it."""

from __future__ import annotations

import psycopg
from psycopg import sql

from controlplane.env import PostgresUrl


def ensure_database(url: PostgresUrl) -> bool:
    """Create the database named by `url` if it is missing; True when it was created.

    Connects to the server's `postgres` maintenance database with the same credentials. Two
    concurrent callers may both see it missing: the loser's CREATE fails with DuplicateDatabase,
    which means the same thing as success.
    """
    with psycopg.connect(
        host=url.host,
        port=url.port,
        user=url.user or None,
        password=url.password or None,
        dbname="postgres",
        connect_timeout=3,
        autocommit=True,
    ) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [url.name]).fetchone()
        if exists:
            return False
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(url.name)))
        except psycopg.errors.DuplicateDatabase:
            return False
        return True
