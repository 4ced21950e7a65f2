"""The data plane's table snapshot lives on a volume in both deployments (issue 13 item 14),
so a restarted data plane serves its last table while Redis is down."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import yaml

from tests.infra.manifests import REPO_ROOT, named

SNAPSHOT_ENV = "GEARBOX_DP_TABLE_SNAPSHOT_PATH"


def _under(path: str, mount: str) -> bool:
    return PurePosixPath(mount) in PurePosixPath(path).parents


def test_kubernetes_data_plane_writes_its_snapshot_to_a_volume() -> None:
    pod = named("Deployment", "gearbox-data-plane")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    path = env[SNAPSHOT_ENV]
    mounts = [m for m in container["volumeMounts"] if _under(path, m["mountPath"])]
    assert len(mounts) == 1, mounts
    assert mounts[0]["mountPath"] != "/tmp"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert "emptyDir" in volumes[mounts[0]["name"]]  # outlives container restarts


def test_compose_data_plane_writes_its_snapshot_to_a_named_volume() -> None:
    compose: dict[str, Any] = yaml.safe_load((REPO_ROOT / "infra/compose/compose.yaml").read_text())
    service = compose["services"]["data-plane"]
    path = service["environment"][SNAPSHOT_ENV]
    sources = [v.split(":")[0] for v in service["volumes"] if _under(path, v.split(":")[1])]
    assert len(sources) == 1
    assert sources[0] in compose["volumes"]  # a named volume: it outlives the container


def test_image_has_the_snapshot_directory_for_its_user() -> None:
    text = (REPO_ROOT / "infra/docker/Dockerfile").read_text()
    assert "install -d -o 10001 -g 10001 /var/lib/gearbox" in text
