"""Kubernetes manifests: schema validation (built-in kinds and vendored CRD schemas), the
embedded copies of rules and dashboards, and the deployment contract between the objects."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from functools import cache
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from tests.infra.manifests import (
    CRD_SCHEMAS,
    K8S_BASE,
    K8S_DIR,
    REPO_ROOT,
    Doc,
    by_kind,
    k8s_documents,
    kustomization,
    named,
    pod_templates,
    selects,
)

# The oldest Kubernetes minor we support and the newest the validator bundles.
K8S_VERSIONS = ("1.30.0", kubernetes_validate.latest_version())
CRD_KINDS = {
    "PrometheusRule": "prometheusrule-monitoring-v1.json",
    "ServiceMonitor": "servicemonitor-monitoring-v1.json",
    "ScaledObject": "scaledobject-keda-v1alpha1.json",
}
DOC_IDS = [f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in k8s_documents()]


@cache
def _crd_validator(kind: str) -> Any:
    schema = json.loads((CRD_SCHEMAS / CRD_KINDS[kind]).read_text())
    return jsonschema.Draft202012Validator(schema)


def _vllm_deployments() -> list[Doc]:
    return [
        d
        for d in by_kind("Deployment")
        if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/component") == "vllm"
    ]


def _container(workload: Doc) -> Doc:
    containers: list[Doc] = workload["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def test_kustomization_lists_every_manifest_in_base() -> None:
    listed = set(kustomization()["resources"])
    generator_files = {f for g in kustomization()["configMapGenerator"] for f in g["files"]}
    on_disk = {p.name for p in K8S_BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk - generator_files
    assert all((K8S_BASE / f).is_file() for f in generator_files)
    assert kustomization()["namespace"] == "gearbox"


@pytest.mark.parametrize(("file", "doc"), k8s_documents(), ids=DOC_IDS)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifest_validates_against_its_schema(file: str, doc: Doc, version: str) -> None:
    if doc["kind"] in CRD_KINDS:
        errors = [e.message for e in _crd_validator(doc["kind"]).iter_errors(doc)]
        assert errors == [], f"{file}: {errors}"
    else:
        kubernetes_validate.validate(doc, version, strict=True)


def test_secrets_example_validates() -> None:
    for doc in yaml.safe_load_all((K8S_DIR / "secrets.example.yaml").read_text()):
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


def test_strict_kubernetes_validation_rejects_a_misspelt_field() -> None:
    doc = copy.deepcopy(named("Deployment", "gearbox-data-plane"))
    doc["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, K8S_VERSIONS[-1], strict=True)


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_crd_schema_rejects_a_misspelt_spec_field(kind: str) -> None:
    doc = copy.deepcopy(by_kind(kind)[0])
    doc["spec"]["selektor"] = {}
    assert not _crd_validator(kind).is_valid(doc)


def test_embedded_copies_are_up_to_date() -> None:
    script = K8S_DIR / "sync_embedded.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_rule_objects_equal_the_rule_files() -> None:
    embedded = {d["metadata"]["name"]: d["spec"]["groups"] for d in by_kind("PrometheusRule")}
    sources = {
        p.name.removesuffix(".rules.yml"): yaml.safe_load(p.read_text())["groups"]
        for p in (REPO_ROOT / "infra" / "prometheus" / "rules").glob("*.rules.yml")
    }
    assert embedded == sources


def test_dashboard_config_map_equals_the_dashboard_files() -> None:
    config_map = named("ConfigMap", "gearbox-grafana-dashboards")
    sources = {
        p.name: p.read_text() for p in (REPO_ROOT / "infra/grafana/dashboards").glob("*.json")
    }
    assert config_map["data"] == sources
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"


@pytest.mark.parametrize(("workload", "template"), list(pod_templates()), ids=lambda v: str(v)[:40])
def test_workload_is_hardened_probed_and_sized(workload: str, template: Doc) -> None:
    pod = template["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True, workload
    assert pod["securityContext"]["runAsUser"] > 0, workload
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"]:
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
        for bound in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(container["resources"][bound]), (workload, bound)
        assert "readinessProbe" in container, workload
        assert "livenessProbe" in container, workload


@pytest.mark.parametrize(
    ("name", "port"), [("gearbox-data-plane", 8080), ("gearbox-control-plane", 8081)]
)
def test_gearbox_process_probes_healthz_and_readyz(name: str, port: int) -> None:
    container = _container(named("Deployment", name))
    assert container["image"] == "ghcr.io/gearbox-router/gearbox:0.1.0"
    assert container["ports"] == [{"name": "http", "containerPort": port}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True


def test_every_vllm_pair_has_a_gpu_a_service_and_a_queue_scaler() -> None:
    deployments = _vllm_deployments()
    assert len(deployments) >= 2, "one vLLM Deployment per pair"
    scalers = {s["spec"]["scaleTargetRef"]["name"]: s for s in by_kind("ScaledObject")}
    services = by_kind("Service")
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        resources = _container(deployment)["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == resources["limits"]["nvidia.com/gpu"] == 1
        assert "replicas" not in deployment["spec"], "KEDA owns the replica count"
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert any(
            s["metadata"]["name"] == name and selects(s["spec"]["selector"], labels)
            for s in services
        )
        triggers = {t["name"]: t for t in scalers[name]["spec"]["triggers"]}
        assert set(triggers) == {"queue", "demand"}
        assert {t["type"] for t in triggers.values()} == {"prometheus"}
        queue = triggers["queue"]["metadata"]
        assert "vllm:num_requests_waiting" in queue["query"]
        assert f'service="{name}"' in queue["query"]
        assert float(queue["threshold"]) > 0
        # docs/METRICS.md "Autoscaling": replicas = demand over one replica's concurrency.
        demand = triggers["demand"]["metadata"]
        pair = labels["gearbox.dev/pair"]
        assert demand["threshold"] == "1"
        for metric in ("gearbox_pair_demand_concurrency", "gearbox_pair_sustainable_concurrency"):
            assert metric in demand["query"]
        # The table's pair name (family@quantization); the label writes '@' as '-'.
        pairs = set(re.findall(r'pair="([^"]+)"', demand["query"]))
        assert len(pairs) == 1
        assert pairs.pop().replace("@", "-") == pair
    assert set(scalers) == {d["metadata"]["name"] for d in deployments}


def test_data_plane_scales_by_hpa_and_survives_drains() -> None:
    deployment = named("Deployment", "gearbox-data-plane")
    hpa = named("HorizontalPodAutoscaler", "gearbox-data-plane")
    pdb = named("PodDisruptionBudget", "gearbox-data-plane")
    assert "replicas" not in deployment["spec"], "the HPA owns the replica count"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "gearbox-data-plane",
    }
    assert hpa["spec"]["minReplicas"] >= 2
    assert pdb["spec"]["minAvailable"] < hpa["spec"]["minReplicas"], "a drain must be possible"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selects(pdb["spec"]["selector"]["matchLabels"], labels)


def _reachable_workloads(policy: Doc) -> set[str]:
    """Workloads in the bundle that some egress peer of `policy` selects."""
    reachable = set()
    for rule in policy["spec"]["egress"]:
        for peer in rule["to"]:
            assert "ipBlock" not in peer, "egress to address ranges is not allowed"
            if "namespaceSelector" in peer:  # only cluster DNS lives in another namespace
                assert peer["namespaceSelector"]["matchLabels"] == {
                    "kubernetes.io/metadata.name": "kube-system"
                }
                assert peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
                assert {p["port"] for p in rule["ports"]} == {53}
                continue
            for name, template in pod_templates():
                if selects(peer["podSelector"]["matchLabels"], template["metadata"]["labels"]):
                    reachable.add(name)
    return reachable


def test_data_plane_may_reach_only_vllm_and_redis() -> None:
    policy = named("NetworkPolicy", "gearbox-data-plane")
    dp_labels = named("Deployment", "gearbox-data-plane")["spec"]["template"]["metadata"]["labels"]
    assert selects(policy["spec"]["podSelector"]["matchLabels"], dp_labels)
    assert "Egress" in policy["spec"]["policyTypes"]
    expected = {d["metadata"]["name"] for d in _vllm_deployments()} | {"gearbox-redis"}
    assert _reachable_workloads(policy) == expected


def test_redis_admits_only_the_two_planes() -> None:
    policy = named("NetworkPolicy", "gearbox-redis")
    allowed = {
        name
        for name, template in pod_templates()
        for rule in policy["spec"]["ingress"]
        for peer in rule["from"]
        if selects(peer["podSelector"]["matchLabels"], template["metadata"]["labels"])
    }
    assert allowed == {"gearbox-data-plane", "gearbox-control-plane"}


def test_services_select_pods_and_their_named_ports() -> None:
    for service in by_kind("Service"):
        matched = [
            t
            for _, t in pod_templates()
            if selects(service["spec"]["selector"], t["metadata"]["labels"])
        ]
        assert matched, service["metadata"]["name"]
        for template in matched:
            names = {p["name"] for c in template["spec"]["containers"] for p in c["ports"]}
            assert {p["targetPort"] for p in service["spec"]["ports"]} <= names


def test_service_monitors_scrape_metrics_of_existing_services() -> None:
    services = by_kind("Service")
    for monitor in by_kind("ServiceMonitor"):
        selected = [
            s
            for s in services
            if selects(monitor["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
        ]
        assert selected, monitor["metadata"]["name"]
        for endpoint in monitor["spec"]["endpoints"]:
            assert endpoint["path"] == "/metrics"
            assert all(
                endpoint["port"] in {p["name"] for p in s["spec"]["ports"]} for s in selected
            )
    # The alert rules select these job names; the operator uses the Service name as the job.
    assert {"gearbox-data-plane", "gearbox-control-plane"} <= {
        s["metadata"]["name"] for s in services
    }
    assert named("ServiceMonitor", "gearbox-data-plane")["spec"]["endpoints"][0]["honorLabels"]


def test_referenced_secrets_are_in_the_example() -> None:
    example = {
        (d["metadata"]["name"], key)
        for d in yaml.safe_load_all((K8S_DIR / "secrets.example.yaml").read_text())
        for key in d["stringData"]
    }
    referenced = {
        (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for _, t in pod_templates()
        for c in t["spec"]["containers"]
        for e in c.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert referenced
    assert referenced <= example


def test_redis_persists_and_requires_its_password() -> None:
    redis = named("StatefulSet", "gearbox-redis")
    assert redis["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"]
    args = _container(redis)["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    assert args[args.index("--appendonly") + 1] == "yes"
