"""The single-GPU-host compose bundle: compose-spec schema, services, mounts, Prometheus and
Grafana provisioning, and the image's Dockerfile."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.infra.manifests import COMPOSE_DIR, COMPOSE_FILE, REPO_ROOT, compose, named

CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"
GEARBOX_IMAGE = "ghcr.io/gearbox-router/gearbox:0.1.0"


def _validate_compose(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(CHECK_JSONSCHEMA), "--builtin-schema", "vendor.compose-spec", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _vllm_services() -> dict[str, dict[str, object]]:
    return {k: v for k, v in compose()["services"].items() if k.startswith("vllm-")}


def test_compose_file_matches_the_compose_spec() -> None:
    result = _validate_compose(COMPOSE_FILE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_spec_check_rejects_a_broken_file(tmp_path: Path) -> None:
    broken = compose()
    broken["services"]["redis"]["restart_policy"] = "always"  # not a service key
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(broken))
    assert _validate_compose(path).returncode != 0


def test_compose_config_renders_when_the_compose_plugin_exists() -> None:
    # Debian bookworm ships no compose v2 plugin; where one exists, let it render the file.
    docker = shutil.which("docker")
    if (
        docker is None
        or subprocess.run([docker, "compose", "version"], capture_output=True).returncode
    ):
        assert _validate_compose(COMPOSE_FILE).returncode == 0
        return
    env = {"GEARBOX_REDIS_PASSWORD": "x" * 24, "GEARBOX_CP_ADMIN_TOKEN": "y" * 24}
    env |= {"GRAFANA_ADMIN_PASSWORD": "z" * 12, "PATH": "/usr/bin:/bin:/usr/local/bin"}
    result = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_compose_has_the_whole_stack() -> None:
    services = compose()["services"]
    assert {"redis", "control-plane", "data-plane", "prometheus", "grafana"} <= set(services)
    assert len(_vllm_services()) >= 2
    for name in ("control-plane", "data-plane"):
        assert services[name]["image"] == GEARBOX_IMAGE
        assert services[name]["user"] != "0"
        assert services[name]["read_only"] is True
        assert "healthcheck" in services[name]
        assert services[name]["depends_on"]["redis"]["condition"] == "service_healthy"
    assert "--requirepass" in services["redis"]["command"]


def test_every_vllm_service_reserves_a_gpu() -> None:
    for name, service in _vllm_services().items():
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]  # type: ignore[index]
        assert device["driver"] == "nvidia", name
        assert "gpu" in device["capabilities"], name
        assert "healthcheck" in service, name


def test_compose_serves_the_same_pairs_as_kubernetes() -> None:
    def served(args: list[str]) -> str:
        return args[args.index("--served-model-name") + 1]

    in_compose = {served(s["command"]) for s in _vllm_services().values()}  # type: ignore[arg-type]
    in_k8s = {
        served(named("Deployment", name)["spec"]["template"]["spec"]["containers"][0]["args"])
        for name in _vllm_services()
    }
    assert in_compose == in_k8s


def test_bind_mounts_point_at_files_in_the_repo() -> None:
    for name, service in compose()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).exists(), f"{name}: {source}"


def test_prometheus_config_is_valid_and_loads_the_rules(promtool: str, tmp_path: Path) -> None:
    config = yaml.safe_load((COMPOSE_DIR / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/etc/prometheus/rules/*.rules.yml"]
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert {"gearbox-data-plane", "gearbox-control-plane", "vllm"} <= jobs
    mounts = compose()["services"]["prometheus"]["volumes"]
    assert "../prometheus/rules:/etc/prometheus/rules:ro" in mounts
    # Check the config with the rule path as the container sees it, mapped to the repo.
    config["rule_files"] = [str(REPO_ROOT / "infra/prometheus/rules/*.rules.yml")]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "rules found" in result.stdout


def test_grafana_provisions_the_datasource_and_the_dashboards() -> None:
    provisioning = COMPOSE_DIR / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources/prometheus.yml").read_text())[
        "datasources"
    ]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    (provider,) = yaml.safe_load((provisioning / "dashboards/gearbox.yml").read_text())["providers"]
    mounts = compose()["services"]["grafana"]["volumes"]
    assert f"../grafana/dashboards:{provider['options']['path']}:ro" in mounts


@pytest.mark.parametrize("variable", ["GEARBOX_REDIS_PASSWORD", "GEARBOX_CP_ADMIN_TOKEN"])
def test_secrets_come_from_the_env_file(variable: str) -> None:
    text = COMPOSE_FILE.read_text()
    assert f"${{{variable}:?" in text, "a missing secret must stop `compose up`"
    assert f"{variable}=" in (COMPOSE_DIR / ".env.example").read_text()


def test_dockerfile_builds_a_non_root_python_image() -> None:
    lines = (REPO_ROOT / "infra/docker/Dockerfile").read_text().splitlines()
    instructions = [line for line in lines if line and not line.startswith(("#", " "))]
    assert instructions[0] == "FROM python:3.11-slim"
    assert any(line.strip().startswith("RUN pip install . ") for line in lines)
    assert not any("force-reinstall" in line for line in lines), "no repair after the install"
    (user,) = [line for line in instructions if line.startswith("USER ")]
    assert user.split()[1].split(":")[0] not in {"0", "root"}
