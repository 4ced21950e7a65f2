"""The settings the manifests pass are ones the processes accept, and the policy is valid."""

from __future__ import annotations

import pytest
import yaml

from contracts.policy import load_policy
from control_plane.settings import ControlPlaneSettings
from data_plane.settings import DataPlaneSettings
from tests.infra.manifests import (
    K8S_BASE,
    by_kind,
    compose,
    compose_env,
    k8s_env,
    named,
    settings_kwargs,
)


def _k8s_container_env(deployment: str) -> dict[str, str]:
    containers = named("Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return k8s_env(containers[0])


@pytest.mark.parametrize(
    "env",
    [_k8s_container_env("gearbox-data-plane"), compose_env(compose()["services"]["data-plane"])],
    ids=["k8s", "compose"],
)
def test_data_plane_env_is_accepted(env: dict[str, str]) -> None:
    settings = DataPlaneSettings(**settings_kwargs(env, "GEARBOX_DP_"))  # type: ignore[arg-type]
    assert settings.server.port == 8080
    assert settings.server.host == "0.0.0.0"
    assert settings.redis.url.startswith("redis://:")
    assert settings.redis.url.endswith("6379/0")
    assert settings.scrape.interval_s > 0, "routing load needs the engines' queue depth"


@pytest.mark.parametrize(
    "env",
    [
        _k8s_container_env("gearbox-control-plane"),
        compose_env(compose()["services"]["control-plane"]),
    ],
    ids=["k8s", "compose"],
)
def test_control_plane_env_is_accepted(env: dict[str, str]) -> None:
    settings = ControlPlaneSettings(**settings_kwargs(env, "GEARBOX_CP_"))  # type: ignore[arg-type]
    assert settings.server.port == 8081
    assert settings.server.host == "0.0.0.0"
    assert settings.server.admin_token is not None
    assert str(settings.policy_file) == "/etc/gearbox/policy.yaml"


def test_unknown_setting_would_be_rejected() -> None:
    # The checks above mean something only because unknown names fail.
    with pytest.raises(ValueError, match="extra"):
        DataPlaneSettings(**settings_kwargs({"GEARBOX_DP_PROT": "8080"}, "GEARBOX_DP_"))  # type: ignore[arg-type]


def test_policy_file_is_a_valid_policy() -> None:
    policy = load_policy(yaml.safe_load((K8S_BASE / "policy.yaml").read_text()))
    assert set(policy.categories) >= {"chat", "extraction", "code", "math", "reasoning"}
    assert all(pair.split("@")[0] == family for family, pair in policy.baselines.items())


def test_control_plane_mounts_the_policy_where_the_setting_points() -> None:
    pod = named("Deployment", "gearbox-control-plane")["spec"]["template"]["spec"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "policy"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "policy"]
    assert mount["mountPath"] == "/etc/gearbox"
    assert volume["configMap"]["name"] == "gearbox-policy"
    compose_mounts = compose()["services"]["control-plane"]["volumes"]
    assert "../k8s/base/policy.yaml:/etc/gearbox/policy.yaml:ro" in compose_mounts


def test_k8s_data_planes_see_every_vllm_pod() -> None:
    """docs/data_plane.md "Endpoint discovery": headless vLLM Services (one address per pod)
    and data planes that re-resolve them."""
    settings = DataPlaneSettings(
        **settings_kwargs(_k8s_container_env("gearbox-data-plane"), "GEARBOX_DP_")  # type: ignore[arg-type]
    )
    assert settings.discovery.interval_s > 0
    vllm = [
        s
        for s in by_kind("Service")
        if s["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"
    ]
    assert len(vllm) >= 2
    assert all(s["spec"]["clusterIP"] == "None" for s in vllm)
