import pytest

from controlplane.env import ConfigError, EnvReader

GOOD = {"SECRET_KEY": "x" * 40}


def read_database_url(value: str) -> EnvReader:
    reader = EnvReader(environ={**GOOD, "DATABASE_URL": value})
    reader.postgres_url("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tollgate")
    return reader


def test_defaults_point_at_local_services() -> None:
    reader = EnvReader(environ={})
    url = reader.postgres_url("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tollgate")
    assert (url.host, url.port, url.name, url.user) == ("127.0.0.1", 5432, "tollgate", "postgres")
    assert reader.redis_url("REDIS_URL", "redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"
    assert reader.port("WEB_PORT", 8000) == 8000
    reader.raise_if_invalid()


def test_database_url_is_parsed_with_credentials_and_port() -> None:
    reader = read_database_url("postgresql://app:s%40cret@db.internal:6543/tollgate_prod")
    reader.raise_if_invalid()
    url = reader.postgres_url("DATABASE_URL", "postgres://x@y/z")
    assert (url.user, url.password, url.host, url.port, url.name) == (
        "app",
        "s@cret",
        "db.internal",
        6543,
        "tollgate_prod",
    )
    assert url.redacted() == "postgres://app:***@db.internal:6543/tollgate_prod"


@pytest.mark.parametrize(
    "value",
    [
        "mysql://app:hunter2@db/tollgate",
        "postgres://app:hunter2@db:notaport/tollgate",
        "postgres://app:hunter2@db:5432/",
        "not a url at all",
    ],
)
def test_bad_database_url_is_one_line_naming_the_variable_and_form(value: str) -> None:
    with pytest.raises(ConfigError) as raised:
        read_database_url(value).raise_if_invalid()
    message = str(raised.value)
    assert "\n" not in message
    assert "DATABASE_URL" in message
    assert "postgres://USER[:PASSWORD]@HOST[:PORT]/DBNAME" in message
    assert "hunter2" not in message


def test_every_mistake_is_reported_at_once() -> None:
    reader = EnvReader(environ={"WEB_PORT": "80800", "DEBUG": "maybe", "REDIS_URL": "http://x"})
    reader.string("SECRET_KEY", min_length=32)
    reader.port("WEB_PORT", 8000)
    reader.boolean("DEBUG", default=False)
    reader.redis_url("REDIS_URL", "redis://127.0.0.1:6379/0")
    with pytest.raises(ConfigError) as raised:
        reader.raise_if_invalid()
    message = str(raised.value)
    for name in ("SECRET_KEY", "WEB_PORT", "DEBUG", "REDIS_URL"):
        assert name in message
    assert "between 1 and 65535" in message


def test_a_short_secret_key_is_rejected_without_echoing_it() -> None:
    reader = EnvReader(environ={"SECRET_KEY": "tooshort"})
    reader.string("SECRET_KEY", min_length=32)
    with pytest.raises(ConfigError) as raised:
        reader.raise_if_invalid()
    assert "tooshort" not in str(raised.value)
    assert "at least 32 characters" in str(raised.value)


def test_redis_url_needs_a_numeric_database() -> None:
    reader = EnvReader(environ={"REDIS_URL": "redis://127.0.0.1:6379/cache"})
    reader.redis_url("REDIS_URL", "redis://127.0.0.1:6379/0")
    with pytest.raises(ConfigError, match="REDIS_URL"):
        reader.raise_if_invalid()


@pytest.mark.parametrize("value", ["0", "-3", "thirty", "1.5"])
def test_a_retention_is_a_whole_number_of_days(value: str) -> None:
    reader = EnvReader(environ={"SAMPLE_RETENTION_DAYS": value})
    assert reader.positive_int("SAMPLE_RETENTION_DAYS", 30) == 30
    assert reader.errors == [
        f"SAMPLE_RETENTION_DAYS: expected a whole number of at least 1; got {value!r}"
    ]
    assert EnvReader(environ={"SAMPLE_RETENTION_DAYS": "7"}).positive_int("X", 30) == 30
    assert EnvReader(environ={"X": " 7 "}).positive_int("X", 30) == 7
