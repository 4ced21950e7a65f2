"""The incumbent: LiteLLM's proxy, in its own cached venv, pinned to one version.

The venv lives under ~/.cache/gearbox/bench-litellm-<version>/ and is created on first use
(`litellm[proxy]` from PyPI). Two set-ups are measured: one deployment, and the same model
over every backend port with LiteLLM's latency-based router.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

LITELLM_VERSION = "1.102.4"  # newest release whose dependencies resolve from this mirror
MODEL_NAME = "bench-model"


def venv_dir(version: str = LITELLM_VERSION) -> Path:
    return Path.home() / ".cache" / "gearbox" / f"bench-litellm-{version}"


def ensure_venv(version: str = LITELLM_VERSION) -> Path:
    """The venv's `litellm` executable, installing the pinned version when it is missing."""
    root = venv_dir(version)
    exe = root / "bin" / "litellm"
    marker = root / ".installed"
    if exe.exists() and marker.exists():
        return exe
    root.parent.mkdir(parents=True, exist_ok=True)
    if not (root / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    pip = [str(root / "bin" / "pip"), "install", "-q", "--disable-pip-version-check"]
    print(f"==> installing litellm[proxy]=={version} into {root} (once)", flush=True)
    subprocess.run([*pip, f"litellm[proxy]=={version}"], check=True)
    marker.write_text(version)
    return exe


def write_config(path: Path, backend_urls: list[str], latency_routing: bool) -> Path:
    """A proxy config: one deployment per backend URL under one model name.

    JSON is valid YAML, so the file is written with the stdlib.
    """
    deployments = [
        {
            "model_name": MODEL_NAME,
            "litellm_params": {
                "model": f"openai/{MODEL_NAME}",
                "api_base": f"{url}/v1",
                "api_key": "sk-bench-not-secret",
            },
        }
        for url in backend_urls
    ]
    config: dict[str, object] = {
        "model_list": deployments,
        "litellm_settings": {"drop_params": True, "telemetry": False},
        "general_settings": {},
    }
    if latency_routing:
        config["router_settings"] = {"routing_strategy": "latency-based-routing"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    return path


def command(exe: Path, config: Path, port: int) -> list[str]:
    return [str(exe), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]


def environment(base: dict[str, str]) -> dict[str, str]:
    """No network at start-up (local cost map), no telemetry, quiet logs."""
    return {
        **base,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "DISABLE_SCHEMA_UPDATE": "True",
    }
