"""The gateway-mode manifests (infra/k8s/gateway, docs/gateway.md): every object validates
against its schema (built-in kinds, vendored CRD schemas), and the objects fit together: one
HTTPRoute per pair on the header the ext_proc sets, each InferencePool selecting that pair's
vLLM pods, both attachments pointing at the ext_proc Service in a body mode it routes with, and
both flavours dropping a client's copies of the headers gateway mode trusts before any filter."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from data_plane.gateway import protos as ext_proc
from data_plane.gateway.exchange import SUPPORTED_MODES
from data_plane.gateway.router import ROUTED_PATHS
from data_plane.request.priority import OBJECTIVE_HEADERS, PRIORITY_HEADER
from data_plane.request.tenant import FAIRNESS_ID_HEADER
from data_plane.settings import DataPlaneSettings
from tests.infra.manifests import CRD_SCHEMAS, K8S_DIR, Doc, by_kind, k8s_env, settings_kwargs

GATEWAY_DIR = K8S_DIR / "gateway"
# Each flavour's own objects: the ext_proc attachment and the early header removal.
FLAVOURS = {
    "envoy-gateway": ["EnvoyExtensionPolicy", "ClientTrafficPolicy"],
    "istio": ["EnvoyFilter"],
}
CRD_KINDS = {
    "InferencePool": "inferencepool-inference-v1.json",
    "HTTPRoute": "httproute-gateway-v1.json",
    "EnvoyExtensionPolicy": "envoyextensionpolicy-envoygateway-v1alpha1.json",
    "ClientTrafficPolicy": "clienttrafficpolicy-envoygateway-v1alpha1.json",
    "EnvoyFilter": "envoyfilter-istio-v1alpha3.json",
}
# Envoy Gateway's names for the body modes Gearbox routes with (data_plane.gateway.exchange).
EG_BODY_MODES = {"Buffered": "BUFFERED", "FullDuplexStreamed": "FULL_DUPLEX_STREAMED"}


def _kustomization(directory: Path) -> Doc:
    data: Doc = yaml.safe_load((directory / "kustomization.yaml").read_text())
    return data


def _documents(directory: Path) -> list[tuple[str, Doc]]:
    """(file, document) of a kustomization, following directory resources."""
    out: list[tuple[str, Doc]] = []
    for resource in _kustomization(directory)["resources"]:
        path = (directory / resource).resolve()
        if path.is_dir():
            out.extend(_documents(path))
            continue
        out.extend((path.name, d) for d in yaml.safe_load_all(path.read_text()) if d)
    return out


# Each flavour holds the shared objects (through "..") and its attachment.
ALL_DOCS = [d for flavour in FLAVOURS for d in _documents(GATEWAY_DIR / flavour)]
UNIQUE = list({(f, d["kind"], d["metadata"]["name"]): (f, d) for f, d in ALL_DOCS}.values())


def _kind(kind: str) -> list[Doc]:
    return [d for _, d in UNIQUE if d["kind"] == kind]


def _one(kind: str, name: str) -> Doc:
    found = [d for d in _kind(kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, (kind, name)
    return found[0]


@cache
def _validator(kind: str) -> Any:
    schema = json.loads((CRD_SCHEMAS / CRD_KINDS[kind]).read_text())
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize(
    ("file", "doc"), UNIQUE, ids=[f"{f}:{d['kind']}/{d['metadata']['name']}" for f, d in UNIQUE]
)
def test_gateway_object_validates_against_its_schema(file: str, doc: Doc) -> None:
    if doc["kind"] in CRD_KINDS:
        errors = [e.message for e in _validator(doc["kind"]).iter_errors(doc)]
        assert errors == [], f"{file}: {errors}"
    else:
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


@pytest.mark.parametrize("kind", sorted(CRD_KINDS))
def test_vendored_schema_rejects_a_misspelt_spec_field(kind: str) -> None:
    doc = copy.deepcopy(_kind(kind)[0])
    assert _validator(kind).is_valid(doc)
    doc["spec"]["targetPortz" if kind == "InferencePool" else "rulez"] = []
    assert not _validator(kind).is_valid(doc)


def test_every_file_is_listed_by_a_kustomization() -> None:
    listed = set(_kustomization(GATEWAY_DIR)["resources"])
    assert listed == {p.name for p in GATEWAY_DIR.glob("*.yaml")} - {"kustomization.yaml"}
    for flavour, kinds in FLAVOURS.items():
        resources = _kustomization(GATEWAY_DIR / flavour)["resources"]
        on_disk = {p.name for p in (GATEWAY_DIR / flavour).glob("*.yaml")}
        assert set(resources) == {".."} | (on_disk - {"kustomization.yaml"})
        assert [d["kind"] for f, d in _documents(GATEWAY_DIR / flavour) if f in on_disk] == kinds


def _vllm_pod_labels() -> dict[str, dict[str, str]]:
    """gearbox.dev/pair label -> pod labels of the base's vLLM Deployments."""
    out = {}
    for deployment in by_kind("Deployment"):
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if labels.get("app.kubernetes.io/component") == "vllm":
            out[labels["gearbox.dev/pair"]] = labels
    return out


def _extproc_settings() -> DataPlaneSettings:
    container = _one("Deployment", "gearbox-extproc")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "data_plane", "extproc"]
    env = settings_kwargs(k8s_env(container), "GEARBOX_DP_")
    return DataPlaneSettings(**env)  # type: ignore[arg-type]


def test_every_pair_has_a_pool_selecting_its_vllm_pods() -> None:
    pods = _vllm_pod_labels()
    pools = {
        p["spec"]["selector"]["matchLabels"]["gearbox.dev/pair"]: p for p in _kind("InferencePool")
    }
    assert set(pools) == set(pods)
    for label, pool in pools.items():
        selector = pool["spec"]["selector"]["matchLabels"]
        assert all(pods[label].get(k) == v for k, v in selector.items()), label
        assert pool["spec"]["targetPorts"] == [{"number": 8000}]  # vLLM's container port


def test_one_route_per_pool_on_the_header_the_extproc_sets() -> None:
    header = _extproc_settings().extproc.pair_header
    pools = {p["metadata"]["name"]: p for p in _kind("InferencePool")}
    routed: dict[str, str] = {}
    for route in _kind("HTTPRoute"):
        for rule in route["spec"]["rules"]:
            (backend,) = rule["backendRefs"]
            assert (backend["group"], backend["kind"]) == (
                "inference.networking.k8s.io",
                "InferencePool",
            )
            assert backend["name"] in pools
            for match in rule["matches"]:
                values = [h["value"] for h in match.get("headers", []) if h["name"] == header]
                if values:
                    routed[values[0]] = backend["name"]
    # The header carries the table's pair name (family@quantization); the pool selects the
    # pods labelled with the same name, '@' written as '-'.
    assert len(routed) == len(pools)
    for pair, pool in routed.items():
        assert pools[pool]["spec"]["selector"]["matchLabels"]["gearbox.dev/pair"] == pair.replace(
            "@", "-"
        )


def test_pair_routes_match_only_the_paths_gearbox_routes() -> None:
    """On 95376ca each pair's route matched `PathPrefix /v1/` plus the pair header: a client's
    own header on `/v1/responses` or `/v1/embeddings` (which Gearbox passes) picked the pool.
    Now a route on the pair header matches exactly the paths the ext_proc routes."""
    header = _extproc_settings().extproc.pair_header
    for route in _kind("HTTPRoute"):
        on_header = [
            m
            for rule in route["spec"]["rules"]
            for m in rule["matches"]
            if any(h["name"] == header for h in m.get("headers", []))
        ]
        if route["metadata"]["name"] == "gearbox-default":
            assert on_header == []
            continue
        paths = sorted((m["path"]["type"], m["path"]["value"]) for m in on_header)
        assert paths == sorted(("Exact", path) for path in ROUTED_PATHS), route["metadata"]
        every = [m for rule in route["spec"]["rules"] for m in rule["matches"]]
        assert len(every) == len(on_header), "a pair route matches only on the pair header"


def test_the_default_route_has_no_header_match() -> None:
    rule = _one("HTTPRoute", "gearbox-default")["spec"]["rules"][0]
    assert all("headers" not in m for m in rule["matches"])


def test_extproc_service_serves_the_configured_grpc_port() -> None:
    settings = _extproc_settings()
    service = _one("Service", "gearbox-extproc")
    grpc_port = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
    assert grpc_port["port"] == settings.extproc.port
    assert grpc_port["appProtocol"] == "kubernetes.io/h2c"
    container = _one("Deployment", "gearbox-extproc")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "grpc", "containerPort": settings.extproc.port} in container["ports"]


def test_envoy_gateway_policy_calls_the_extproc_in_a_routing_body_mode() -> None:
    (ext_proc,) = _one("EnvoyExtensionPolicy", "gearbox-extproc")["spec"]["extProc"]
    assert ext_proc["backendRefs"] == [
        {"name": "gearbox-extproc", "port": _extproc_settings().extproc.port}
    ]
    mode = EG_BODY_MODES[ext_proc["processingMode"]["request"]["body"]]
    assert _mode_value(mode) in SUPPORTED_MODES
    # The answer's last chunk tells gateway mode that the request ended (docs/gateway.md).
    assert ext_proc["processingMode"]["response"] == {"body": "Streamed"}
    assert ext_proc["failOpen"] is False
    # A request held in the queue is answered before Envoy's timer gives up on Gearbox.
    assert _extproc_settings().extproc.max_hold_s < _seconds(ext_proc["messageTimeout"])


def test_istio_filter_calls_the_extproc_in_a_routing_body_mode() -> None:
    patches = _one("EnvoyFilter", "gearbox-extproc")["spec"]["configPatches"]
    (patch,) = [p for p in patches if p["applyTo"] == "HTTP_FILTER"]
    config = patch["patch"]["value"]["typed_config"]
    cluster = config["grpc_service"]["envoy_grpc"]["cluster_name"]
    assert (
        cluster
        == f"outbound|{_extproc_settings().extproc.port}||gearbox-extproc.gearbox.svc.cluster.local"
    )
    mode = config["processing_mode"]
    assert _mode_value(mode["request_body_mode"]) in SUPPORTED_MODES
    # Envoy refuses FULL_DUPLEX_STREAMED unless trailers are sent too.
    assert mode["request_trailer_mode"] == "SEND"
    assert (mode["response_header_mode"], mode["response_body_mode"]) == ("SEND", "STREAMED")
    assert _extproc_settings().extproc.max_hold_s < _seconds(config["message_timeout"])


def _trusted_headers() -> set[str]:
    """The request headers gateway mode reads as the Gateway's when no key says otherwise
    (docs/gateway.md, "Priority from the objective header"), as the ext_proc Deployment
    configures it."""
    settings = _extproc_settings()
    names = {*OBJECTIVE_HEADERS, FAIRNESS_ID_HEADER, settings.admission.tenant_header}
    names.add(settings.extproc.pair_header)
    if settings.admission.priority_header_trusted:
        names.add(PRIORITY_HEADER)
    return {n.lower() for n in names}


def test_envoy_gateway_drops_a_clients_trusted_headers_before_any_filter() -> None:
    # earlyRequestHeaders run before route selection and every HTTP filter (ext_proc
    # included); an HTTPRoute's RequestHeaderModifier runs in the router, after ext_proc.
    spec = _one("ClientTrafficPolicy", "gearbox-client-headers")["spec"]
    assert spec["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "inference-gateway"}
    ]
    removed = {n.lower() for n in spec["headers"]["earlyRequestHeaders"]["remove"]}
    assert _trusted_headers() <= removed, _trusted_headers() - removed
    assert PRIORITY_HEADER.lower() not in removed  # a client may still lower its class


def test_istio_drops_a_clients_trusted_headers_before_any_filter() -> None:
    patches = _one("EnvoyFilter", "gearbox-extproc")["spec"]["configPatches"]
    (patch,) = [p for p in patches if p["applyTo"] == "NETWORK_FILTER"]
    assert patch["match"]["context"] == "GATEWAY"
    assert patch["match"]["listener"]["filterChain"]["filter"] == {
        "name": "envoy.filters.network.http_connection_manager"
    }
    assert patch["patch"]["operation"] == "MERGE"
    config = patch["patch"]["value"]["typed_config"]
    assert config["@type"].endswith("http_connection_manager.v3.HttpConnectionManager")
    (early,) = config["early_header_mutation_extensions"]
    assert early["name"] == "envoy.http.early_header_mutation.header_mutation"
    mutation = early["typed_config"]
    assert mutation["@type"].endswith("early_header_mutation.header_mutation.v3.HeaderMutation")
    removed = {m["remove"].lower() for m in mutation["mutations"]}
    assert _trusted_headers() <= removed, _trusted_headers() - removed


def test_no_route_filter_stands_in_for_the_early_removal() -> None:
    # A route's header filter runs in the router, after ext_proc has read the headers: one
    # that removes or sets a trusted header would only look like protection.
    trusted = _trusted_headers() - {_extproc_settings().extproc.pair_header}
    for route in _kind("HTTPRoute"):
        for rule in route["spec"]["rules"]:
            for f in rule.get("filters", []):
                modifier = f.get("requestHeaderModifier") or {}
                touched = {str(n).lower() for n in modifier.get("remove", [])}
                touched |= {h["name"].lower() for k in ("set", "add") for h in modifier.get(k, [])}
                assert not touched & trusted, (route["metadata"]["name"], touched & trusted)


def _seconds(duration: str) -> float:
    """A duration as the manifests write it ("2s", "500ms")."""
    if duration.endswith("ms"):
        return float(duration[:-2]) / 1000
    assert duration.endswith("s"), duration
    return float(duration[:-1])


def _mode_value(name: str) -> int:
    value: int = ext_proc.ProcessingMode.BodySendMode.Value(name)
    return value
