"""Readers for the deployment manifests under infra/k8s and infra/compose (no cluster needed)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = REPO_ROOT / "infra" / "k8s"
K8S_BASE = K8S_DIR / "base"
COMPOSE_DIR = REPO_ROOT / "infra" / "compose"
COMPOSE_FILE = COMPOSE_DIR / "compose.yaml"
CRD_SCHEMAS = Path(__file__).resolve().parent / "crd_schemas"
WORKLOAD_KINDS = {"Deployment", "StatefulSet"}
# What a secret or an interpolated variable stands for when settings are checked offline.
PLACEHOLDER = "placeholder-secret-0123456789abcdef"
_K8S_VAR = re.compile(r"\$\([A-Z0-9_]+\)")
_COMPOSE_VAR = re.compile(r"\$\{[A-Z0-9_]+(?::?[-?][^}]*)?\}")

Doc = dict[str, Any]


def kustomization() -> Doc:
    data: Doc = yaml.safe_load((K8S_BASE / "kustomization.yaml").read_text())
    return data


def k8s_documents() -> list[tuple[str, Doc]]:
    """(file name, document) for every resource the kustomization lists."""
    out: list[tuple[str, Doc]] = []
    for name in kustomization()["resources"]:
        for doc in yaml.safe_load_all((K8S_BASE / name).read_text()):
            if doc:
                out.append((name, doc))
    return out


def by_kind(kind: str) -> list[Doc]:
    return [doc for _, doc in k8s_documents() if doc["kind"] == kind]


def named(kind: str, name: str) -> Doc:
    matches = [d for d in by_kind(kind) if d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_templates() -> Iterator[tuple[str, Doc]]:
    """(workload name, pod template) of every Deployment and StatefulSet."""
    for _, doc in k8s_documents():
        if doc["kind"] in WORKLOAD_KINDS:
            yield doc["metadata"]["name"], doc["spec"]["template"]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """A matchLabels selector matches a label set."""
    return all(labels.get(k) == v for k, v in selector.items())


def k8s_env(container: Doc) -> dict[str, str]:
    """A container's env as the process sees it, secrets and $(VAR) references as placeholders."""
    env: dict[str, str] = {}
    for item in container.get("env", []):
        value = item.get("value", PLACEHOLDER)  # valueFrom: a secret or a field
        env[item["name"]] = _K8S_VAR.sub(PLACEHOLDER, value)
    return env


def compose() -> Doc:
    data: Doc = yaml.safe_load(COMPOSE_FILE.read_text())
    return data


def compose_env(service: Doc) -> dict[str, str]:
    """A compose service's environment with ${VAR...} interpolations as placeholders."""
    return {k: _COMPOSE_VAR.sub(PLACEHOLDER, str(v)) for k, v in service["environment"].items()}


def settings_kwargs(env: dict[str, str], prefix: str) -> dict[str, str]:
    """GEARBOX_XX_FOO=v -> {"foo": v}, the init kwargs a pydantic BaseSettings accepts."""
    return {k.removeprefix(prefix).lower(): v for k, v in env.items() if k.startswith(prefix)}
