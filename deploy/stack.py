"""Start and stop Tollgate's local stack: `python deploy/stack.py up|down|status|secret-key`.

`up` starts whatever of Postgres, Redis and Prometheus is not already answering, prepares the
database, then starts the web server, a Celery worker and Celery beat. It is idempotent: what runs
is left alone. Every process it starts is recorded under var/run/ so that `down` stops exactly
those and nothing else. Logs go to var/log/. When something cannot be started it says what is
missing and how to get it. `venv-packages` and `test-packages` install the Debian packages that
`make venv` and `make test` need (as root; anyone else is told which to install).

Standard library only: this runs before anything else is known to work.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
# TOLLGATE_VAR_DIR lets a second stack (the tests' own) run beside the developer's.
VAR = Path(os.environ.get("TOLLGATE_VAR_DIR") or ROOT / "var").resolve()
LOG_DIR = VAR / "log"
RUN_DIR = VAR / "run"
VENV_BIN = ROOT / ".venv" / "bin"
SECRET_KEY_FILE = VAR / "secret-key"
METRICS_DIR = RUN_DIR / "prometheus-multiproc"
# The gateway serves its own metrics on a listener of its own (GATEWAY_METRICS_PORT), so its files
# must not mix with the web's.
GATEWAY_METRICS_DIR = RUN_DIR / "prometheus-multiproc-gateway"
PROMETHEUS_DIR = VAR / "prometheus"
POSTGRES_RECORD = RUN_DIR / "postgres.cluster"
LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1"}


class StackError(Exception):
    """Something could not be started; the message says what is missing and how to get it."""


def say(message: str) -> None:
    print(f"tollgate: {message}", flush=True)


def shown(path: Path) -> str:
    """A path as people would type it: relative to the checkout when it lies inside."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def secret_key() -> str:
    """The development SECRET_KEY: made once per checkout and kept in var/ (mode 600)."""
    if not SECRET_KEY_FILE.exists():
        VAR.mkdir(parents=True, exist_ok=True)
        SECRET_KEY_FILE.write_text(secrets.token_urlsafe(50) + "\n")
        SECRET_KEY_FILE.chmod(0o600)
    return SECRET_KEY_FILE.read_text().strip()


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("SECRET_KEY", secret_key())
    env["PROMETHEUS_MULTIPROC_DIR"] = str(METRICS_DIR)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def host_port(name: str, default: str, default_port: int) -> tuple[str, int]:
    url = os.environ.get(name) or default
    try:
        parts = urlsplit(url)
        return parts.hostname or "127.0.0.1", parts.port or default_port
    except ValueError as exc:
        raise StackError(f"{name} is not a valid URL ({exc}); fix it or unset it") from exc


def env_port(name: str, default: int) -> int:
    raw = os.environ.get(name) or str(default)
    if not raw.isdigit():
        raise StackError(f"{name} must be a TCP port number, got {raw!r}")
    return int(raw)


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 -- local URL
            return bool(200 <= response.status < 300)
    except OSError:
        return False


def wait_until(check: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    return False


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


# --- processes that this script starts and stops -------------------------------------------------


@dataclass(frozen=True)
class Managed:
    """A long-running process started by `up`, recorded in var/run/<name>.json."""

    name: str
    argv: list[str]
    ready: Callable[[], bool]
    ready_within_s: float = 30.0
    env: dict[str, str] | None = None  # overrides of the shared environment

    @property
    def record(self) -> Path:
        return RUN_DIR / f"{self.name}.json"

    @property
    def log(self) -> Path:
        return LOG_DIR / f"{self.name}.log"

    def running_pid(self) -> int | None:
        """The recorded pid if that process is alive and still the one we started."""
        try:
            recorded = json.loads(self.record.read_text())
            pid = int(recorded["pid"])
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, KeyError):
            return None
        # A recycled pid running something else is not ours to stop.
        return pid if recorded["argv0"] in cmdline else None

    def start(self, env: dict[str, str]) -> None:
        pid = self.running_pid()
        if pid is not None:
            say(f"{self.name}: already running (pid {pid})")
            return
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            process = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env={**env, **(self.env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: `down` stops its children too
            )
        self.record.write_text(json.dumps({"pid": process.pid, "argv0": self.argv[0]}))

        def ready_or_dead() -> bool:
            return process.poll() is not None or self.ready()

        if wait_until(ready_or_dead, self.ready_within_s) and process.poll() is None:
            say(f"{self.name}: started (pid {process.pid}, log {shown(self.log)})")
            return
        self.stop()
        tail = self.log.read_text(errors="replace").splitlines()[-15:]
        detail = "\n    ".join(tail) or "(the log is empty)"
        raise StackError(
            f"{self.name} did not become ready; last lines of {shown(self.log)}:\n    {detail}"
        )

    def stop(self) -> bool:
        pid = self.running_pid()
        self.record.unlink(missing_ok=True)
        if pid is None:
            return False
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        if not wait_until(lambda: not Path(f"/proc/{pid}").exists() or _zombie(pid), 15):
            os.killpg(pid, signal.SIGKILL)
        return True


def _zombie(pid: int) -> bool:
    try:
        return " Z " in Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True


# --- backing services: started only when not already answering ----------------------------------


def ensure_postgres() -> None:
    host, port = host_port("DATABASE_URL", "postgres://127.0.0.1:5432/tollgate", 5432)
    if answers(host, port):
        say(f"postgres: already running at {host}:{port}")
        return
    if host not in LOCAL_HOSTS:
        raise StackError(
            f"Postgres at {host}:{port} (DATABASE_URL) does not answer: start it, or point "
            "DATABASE_URL at a running server"
        )
    if not shutil.which("pg_lsclusters"):
        raise StackError(
            f"Postgres is not running on port {port} and is not installed here: install it "
            "(apt-get install postgresql) or point DATABASE_URL at a running server"
        )
    listing = subprocess.run(
        ["pg_lsclusters", "--no-header"], capture_output=True, text=True, check=False
    )
    clusters = [line.split() for line in listing.stdout.splitlines() if line.strip()]
    match = next((c for c in clusters if len(c) > 2 and c[2] == str(port)), None)
    if match is None:
        raise StackError(
            f"no local Postgres cluster listens on port {port}: create one "
            f"(pg_createcluster --port {port} <version> main) or fix DATABASE_URL"
        )
    version, cluster = match[0], match[1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "start"], check=False
    )
    if not wait_until(lambda: answers(host, port), 20):
        raise StackError(
            f"Postgres cluster {version}/{cluster} did not start; see /var/log/postgresql/"
        )
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    POSTGRES_RECORD.write_text(f"{version} {cluster}\n")
    say(f"postgres: started cluster {version}/{cluster} on port {port}")


def redis_process() -> Managed:
    host, port = host_port("REDIS_URL", "redis://127.0.0.1:6379/0", 6379)
    data_dir = VAR / "redis"
    argv = [
        shutil.which("redis-server") or "redis-server",
        "--bind", "127.0.0.1", "--port", str(port),
        "--save", "", "--appendonly", "no", "--dir", str(data_dir),
    ]  # fmt: skip
    return Managed("redis", argv, ready=lambda: answers(host, port))


def ensure_redis() -> None:
    host, port = host_port("REDIS_URL", "redis://127.0.0.1:6379/0", 6379)
    process = redis_process()
    if process.running_pid() is None and answers(host, port):
        say(f"redis: already running at {host}:{port}")
        return
    if host not in LOCAL_HOSTS:
        raise StackError(f"Redis at {host}:{port} (REDIS_URL) does not answer: start it")
    if not shutil.which("redis-server"):
        raise StackError(
            f"Redis is not running on port {port} and is not installed here: install it "
            "(apt-get install redis-server) or point REDIS_URL at a running server"
        )
    (VAR / "redis").mkdir(parents=True, exist_ok=True)
    process.start(child_env())


def install_debian_package(package: str, *, reason: str, otherwise: str = "") -> None:
    """Install the Debian package whose command of the same name is missing, when run as root.

    Anyone else gets one line naming the package to install (and `otherwise`, another way out).
    """
    if shutil.which(package):
        return
    if not (is_root() and shutil.which("apt-get")):
        raise StackError(
            f"{reason}, and the Debian package {package} is not installed: install it "
            f"(sudo apt-get install {package}){otherwise}"
        )
    say(f"{package}: installing the Debian package (apt-get install {package})")
    apt_env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")

    def apt_get(*args: str) -> bool:
        command = ["apt-get", *args]
        quiet = subprocess.DEVNULL
        return subprocess.run(command, env=apt_env, stdout=quiet, stderr=quiet).returncode == 0

    install = ("install", "-y", "-q", "--no-install-recommends", package)
    # The package lists may be missing or stale on a fresh machine: update once and retry.
    if not apt_get(*install) and not (apt_get("update", "-q") and apt_get(*install)):
        raise StackError(f"apt-get install {package} failed; run it by hand to see why")


def install_prometheus() -> None:
    install_debian_package(
        "prometheus",
        reason="Prometheus is not running",
        otherwise=" or point PROMETHEUS_URL at a running server",
    )


def venv_packages() -> None:
    """What `make venv` needs beyond Python: npm, which installs the pinned htmx package."""
    install_debian_package("npm", reason="htmx is installed with npm")


def test_packages() -> None:
    """What `make test` needs beyond the virtual environment: its own Prometheus servers and a
    real browser (Debian's packages, installed when run as root)."""
    install_debian_package("prometheus", reason="make test starts Prometheus servers of its own")
    install_debian_package("chromium", reason="make test drives a real browser")


def prometheus_process() -> Managed:
    host, port = host_port("PROMETHEUS_URL", "http://127.0.0.1:9090", 9090)
    config = PROMETHEUS_DIR / "prometheus.yml"
    argv = [
        shutil.which("prometheus") or "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={PROMETHEUS_DIR / 'data'}",
        "--storage.tsdb.retention.time=15d",
        f"--web.listen-address={host}:{port}",
        "--web.enable-lifecycle",
    ]
    return Managed("prometheus", argv, ready=lambda: http_ok(f"http://{host}:{port}/-/ready"))


PROMETHEUS_TOKEN = PROMETHEUS_DIR / "token"


def render_prometheus_config() -> None:
    PROMETHEUS_DIR.mkdir(parents=True, exist_ok=True)
    template = Template((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    rendered = template.substitute(
        WEB_PORT=env_port("WEB_PORT", 8000),
        GATEWAY_METRICS_PORT=env_port("GATEWAY_METRICS_PORT", 8081),
        TOKEN_FILE=PROMETHEUS_TOKEN,
    )
    (PROMETHEUS_DIR / "prometheus.yml").write_text(rendered)


def ensure_prometheus() -> None:
    host, port = host_port("PROMETHEUS_URL", "http://127.0.0.1:9090", 9090)
    process = prometheus_process()
    if process.running_pid() is None and answers(host, port):
        say(f"prometheus: already running at {host}:{port}")
        return
    if host not in LOCAL_HOSTS:
        raise StackError(f"Prometheus at {host}:{port} (PROMETHEUS_URL) does not answer")
    install_prometheus()
    render_prometheus_config()
    prometheus_process().start(child_env())


# --- the control plane itself ---------------------------------------------------------------------


def manage(*args: str) -> None:
    result = subprocess.run(
        [str(VENV_BIN / "python"), "manage.py", *args], cwd=ROOT, env=child_env(), check=False
    )
    if result.returncode != 0:
        # manage.py has already printed one line saying what is wrong.
        raise StackError(f"'manage.py {' '.join(args)}' failed (see the line above)")


def log_mentions(name: str, text: str) -> bool:
    """Whether the end of a process's log contains `text` (Celery says when it is ready)."""
    try:
        with (LOG_DIR / f"{name}.log").open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - 8192))
            return text in log.read().decode(errors="replace")
    except OSError:
        return False


def simfleet_ports() -> list[int]:
    base = env_port("SIMFLEET_BASE_PORT", 9101)
    replicas = env_port("SIMFLEET_REPLICAS", 9)  # three each: baseline, candidate, control
    return [base + i for i in range(replicas)]


def app_processes() -> list[Managed]:
    web_port = env_port("WEB_PORT", 8000)
    gateway_port = env_port("GATEWAY_PORT", 8080)
    fleet_ports = simfleet_ports()
    celery = str(VENV_BIN / "celery")
    beat_pidfile = RUN_DIR / "celerybeat.pid"
    return [
        # The development fleet: vLLM-compatible replicas that need no GPU.
        Managed(
            "simfleet",
            [
                str(VENV_BIN / "python"),
                "-m",
                "simfleet",
                "--replicas",
                str(len(fleet_ports)),
                "--base-port",
                str(fleet_ports[0]),
            ],
            ready=lambda: all(http_ok(f"http://127.0.0.1:{p}/health") for p in fleet_ports),
        ),
        Managed(
            "gateway",
            [str(VENV_BIN / "python"), "-m", "gateway"],
            ready=lambda: http_ok(f"http://127.0.0.1:{gateway_port}/healthz"),
            env={"PROMETHEUS_MULTIPROC_DIR": str(GATEWAY_METRICS_DIR)},
        ),
        Managed(
            "web",
            [str(VENV_BIN / "gunicorn"), "controlplane.wsgi", "-c", "deploy/gunicorn.conf.py"],
            ready=lambda: http_ok(f"http://127.0.0.1:{web_port}/healthz"),
        ),
        Managed(
            "worker",
            [celery, "-A", "controlplane", "worker", "-l", "INFO", "-c", "2", "-n", "tollgate@%h"],
            ready=lambda: log_mentions("worker", "ready."),
        ),
        Managed(
            "beat",
            [celery, "-A", "controlplane", "beat", "-l", "INFO", "--pidfile", str(beat_pidfile)],
            ready=lambda: log_mentions("beat", "beat: Starting"),
        ),
    ]


def check_web_port_free() -> None:
    web = next(p for p in app_processes() if p.name == "web")
    port = env_port("WEB_PORT", 8000)
    if web.running_pid() is None and answers("127.0.0.1", port):
        raise StackError(
            f"port {port} is taken by another program: stop it, or set WEB_PORT to a free port"
        )


def up() -> None:
    if not (VENV_BIN / "python").exists():
        raise StackError("no .venv here: run 'make venv' (or 'make up', which makes it) first")
    # var/static is where `collectstatic` would write; whitenoise warns when it is missing.
    for directory in (LOG_DIR, RUN_DIR, VAR / "static"):
        directory.mkdir(parents=True, exist_ok=True)
    ensure_postgres()
    ensure_redis()
    ensure_prometheus()
    manage("ensure_database")
    manage("migrate", "--no-input", "-v", "0")
    manage("prometheus_sd_token", str(PROMETHEUS_TOKEN))
    check_web_port_free()
    processes = app_processes()
    # Metric files of a previous run would be merged into the new one's numbers.
    running = {p.name for p in processes if p.running_pid() is not None}
    if not running & {"web", "worker"}:
        shutil.rmtree(METRICS_DIR, ignore_errors=True)
    if "gateway" not in running:
        shutil.rmtree(GATEWAY_METRICS_DIR, ignore_errors=True)
    METRICS_DIR.mkdir(parents=True, exist_ok=True)
    GATEWAY_METRICS_DIR.mkdir(parents=True, exist_ok=True)
    env = child_env()
    for process in processes:
        process.start(env)


def traffic_process() -> Managed:
    """`make demo`'s traffic through the gateway, so the canary has samples to be judged on."""
    return Managed(
        "traffic",
        [str(VENV_BIN / "python"), "manage.py", "demo_traffic"],
        ready=lambda: True,
        ready_within_s=2,
    )


def traffic() -> None:
    traffic_process().start(child_env())


def down() -> None:
    stopped = []
    processes = [traffic_process(), *reversed(app_processes()), prometheus_process()]
    for process in [*processes, redis_process()]:
        if process.stop():
            stopped.append(process.name)
    if POSTGRES_RECORD.exists():
        version, cluster = POSTGRES_RECORD.read_text().split()
        subprocess.run(
            ["pg_ctlcluster", "--skip-systemctl-redirect", version, cluster, "stop"], check=False
        )
        POSTGRES_RECORD.unlink()
        stopped.append("postgres")
    say("stopped " + ", ".join(stopped) if stopped else "nothing that 'up' started is running")


def status() -> None:
    for process in [redis_process(), prometheus_process(), *app_processes(), traffic_process()]:
        pid = process.running_pid()
        say(f"{process.name}: " + (f"running (pid {pid})" if pid else "not started by 'up'"))


def main(argv: list[str]) -> int:
    commands: dict[str, Callable[[], None]] = {
        "up": up,
        "down": down,
        "status": status,
        "traffic": traffic,
        "venv-packages": venv_packages,
        "test-packages": test_packages,
        "secret-key": lambda: print(secret_key()),
    }
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: {sys.argv[0]} {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    try:
        commands[argv[0]]()
    except StackError as exc:
        print(f"tollgate: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
