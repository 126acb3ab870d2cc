"""Tollgate control-plane settings: read from environment variables only (see controlplane/env.py).

Every variable is validated at import, so a web server, worker or management command with a bad
environment stops at start-up with one line naming the variable and the expected form.
"""

from __future__ import annotations

from pathlib import Path

import django_stubs_ext

from controlplane.env import EnvReader

# Lets runtime code subscript generic Django classes (ModelAdmin[Tenant]) as the stubs do.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

env = EnvReader()

DEBUG = env.boolean("DEBUG", default=False)
ALLOWED_HOSTS = env.csv("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")
# `make` keeps a development key in var/secret-key (deploy/stack.py). It stands in for an unset
# SECRET_KEY only while the site answers to local addresses alone, so that `manage.py` works in a
# checkout; a deployment that serves any other host must set SECRET_KEY itself.
VAR_DIR = Path(env.string("TOLLGATE_VAR_DIR", str(BASE_DIR / "var"))).resolve()
SERVES_LOCAL_ONLY = set(ALLOWED_HOSTS) <= {"localhost", "127.0.0.1", "[::1]", "::1"}
SECRET_KEY = env.secret(
    "SECRET_KEY",
    min_length=32,
    development_file=VAR_DIR / "secret-key" if SERVES_LOCAL_ONLY else None,
)
CSRF_TRUSTED_ORIGINS = env.csv("CSRF_TRUSTED_ORIGINS", "")

DATABASE = env.postgres_url("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/tollgate")
REDIS_URL = env.redis_url("REDIS_URL", "redis://127.0.0.1:6379/0")
CELERY_BROKER_URL = env.redis_url("CELERY_BROKER_URL", REDIS_URL)
PROMETHEUS_URL = env.http_url("PROMETHEUS_URL", "http://127.0.0.1:9090")

WEB_PORT = env.port("WEB_PORT", 8000)
GATEWAY_PORT = env.port("GATEWAY_PORT", 8080)
SIMFLEET_BASE_PORT = env.port("SIMFLEET_BASE_PORT", 9101)
# Where people reach the web UI and the gateway; printed by seed_demo and shown in the UI.
PUBLIC_WEB_URL = env.http_url("PUBLIC_WEB_URL", f"http://127.0.0.1:{WEB_PORT}")
PUBLIC_GATEWAY_URL = env.http_url("PUBLIC_GATEWAY_URL", f"http://127.0.0.1:{GATEWAY_PORT}")

LOG_LEVEL = env.choice("LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR"))
# Request samples older than this are deleted (hourly, in batches), except a live rollout's.
SAMPLE_RETENTION_DAYS = env.positive_int("SAMPLE_RETENTION_DAYS", 30)

env.raise_if_invalid()

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_celery_beat",
    "core",
    "controlplane",
    "tenants",
    "registry",
    "rollouts",
    "evaluation",
    "orchestration",
    "workers",
]

MIDDLEWARE = [
    "controlplane.middleware.RequestIdMiddleware",
    "controlplane.middleware.RequestMetricsMiddleware",
    "controlplane.middleware.RejectNulMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "controlplane.middleware.IdempotencyMiddleware",
    "controlplane.middleware.DependencyUnavailableMiddleware",
]

ROOT_URLCONF = "controlplane.urls"
WSGI_APPLICATION = "controlplane.wsgi.application"
ASGI_APPLICATION = "controlplane.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": DATABASE.name,
        "USER": DATABASE.user,
        "PASSWORD": DATABASE.password,
        "HOST": DATABASE.host,
        "PORT": DATABASE.port,
        # Fail fast when the server is away: /readyz must answer within seconds, not hang.
        "OPTIONS": {"connect_timeout": 3},
        "CONN_MAX_AGE": 60,
        "CONN_HEALTH_CHECKS": True,
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# lm-evaluation-harness results files with per-sample configs can run to several megabytes.
EVAL_UPLOAD_MAX_BYTES = 10 * 1024 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = EVAL_UPLOAD_MAX_BYTES

AUTH_USER_MODEL = "tenants.User"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
# htmx comes from its npm package (pinned in package.json), never from a CDN.
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("vendor/htmx", BASE_DIR / "node_modules" / "htmx.org" / "dist"),
]
# Serve straight from the finders: the control plane's static files are few and small, and this
# keeps `collectstatic` out of the development loop.
WHITENOISE_USE_FINDERS = True

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "tenants.permissions.TokenHasScopes",
    ],
    # DRF's own, bounded in size and depth and refusing NUL characters (core/parsers.py).
    "DEFAULT_PARSER_CLASSES": [
        "core.parsers.JSONParser",
        "core.parsers.FormParser",
        "core.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "EXCEPTION_HANDLER": "core.api.exception_handler",
    "UNAUTHENTICATED_USER": None,
    # `?format=` is a filter (artifact format) here, not a renderer switch.
    "URL_FORMAT_OVERRIDE": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Tollgate API",
    "DESCRIPTION": "Model registry, rollouts, evaluation and tenant budgets for vLLM fleets.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SCHEMA_PATH_PREFIX": "/api/v1",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.idempotency.document_header",
    ],
    "ENUM_NAME_OVERRIDES": {
        "RolloutStateEnum": "rollouts.choices.RolloutState",
        "DeploymentStateEnum": "rollouts.choices.DeploymentState",
        "ReplicaStateEnum": "rollouts.choices.ReplicaState",
        "TierEnum": "tenants.choices.Tier",
    },
}

# Celery: Redis broker, JSON only, no result backend (outcomes are rows and events, not results).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_TIME_LIMIT = 120
CELERY_TASK_SOFT_TIME_LIMIT = 100
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "workers-heartbeat": {"task": "system.heartbeat", "schedule": 10.0},
    "system-prune-idempotency-keys": {"task": "system.prune_idempotency_keys", "schedule": 3600.0},
    # A safety net: changes publish at once after commit; this repairs a lost announcement.
    "gateway-publish": {"task": "gateway.publish", "schedule": 30.0},
    # A Redis that restarted without its data (or from an older save) gets a snapshot, and its
    # budget counters back from the usage rows, within a tick; each check is a few reads.
    "gateway-republish-if-lost": {"task": "gateway.republish_if_lost", "schedule": 2.0},
    "tenants-rebuild-budget-counters": {"task": "tenants.rebuild_budget_counters", "schedule": 2.0},
    "evaluation-consume-samples": {"task": "evaluation.consume_samples", "schedule": 1.0},
    "evaluation-prune-samples": {"task": "evaluation.prune_samples", "schedule": 3600.0},
    "evaluation-observe-costs": {"task": "evaluation.observe_costs", "schedule": 60.0},
    "rollouts-tick": {"task": "rollouts.tick", "schedule": 2.0},
    "rollouts-probe-replicas": {"task": "rollouts.probe_replicas", "schedule": 10.0},
    "rollouts-prepare-deployments": {"task": "rollouts.prepare_deployments", "schedule": 5.0},
    "rollouts-update-saturation": {"task": "rollouts.update_saturation", "schedule": 5.0},
    "tenants-consume-usage": {"task": "tenants.consume_usage", "schedule": 2.0},
    "tenants-compact-usage": {"task": "tenants.compact_usage", "schedule": 3600.0},
    "tenants-check-soft-limits": {"task": "tenants.check_soft_limits", "schedule": 5.0},
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "context": {"()": "controlplane.logging.ContextFilter"},
        "routine_beat": {"()": "controlplane.logging.RoutineBeatFilter"},
    },
    "formatters": {"json": {"()": "controlplane.logging.JsonFormatter"}},
    "handlers": {
        "stdout": {"class": "logging.StreamHandler", "formatter": "json", "filters": ["context"]},
    },
    "root": {"handlers": ["stdout"], "level": LOG_LEVEL},
    "loggers": {
        # Request lines come from RequestMetricsMiddleware, with the request id; Django's own
        # access-style warnings for 4xx would only repeat them.
        "django.request": {"level": "ERROR"},
        "django.server": {"level": "ERROR"},
        "celery": {"level": LOG_LEVEL},
        # Beat ticks run tasks every second or two; their outcomes are counted in /metrics
        # (tollgate_celery_tasks_total), and a log line each would bury everything else.
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        "celery.beat": {"filters": ["routine_beat"]},
    },
}
