"""request/tenant.py and telemetry/tenants.py: who a request is, and bounded labels."""

from __future__ import annotations

import pytest

from contracts.policy import Policy
from data_plane.errors import InvalidRequest
from data_plane.request.identity import Rights, identify
from data_plane.request.tenant import ANONYMOUS, FAIRNESS_ID_HEADER, key_tenant
from data_plane.telemetry.tenants import HASHED_PREFIX, OTHER, TenantLabels, label_of

HEADER = "x-gearbox-tenant"


def tenant_of(headers: dict[str, str], header: str, salt: bytes | None) -> str:
    """The tenant without API keys configured (the headers are read as sent)."""
    return identify(headers, Policy(), Rights(header, salt)).tenant


def test_the_configured_header_wins_then_llm_ds_fairness_id() -> None:
    both = {HEADER: "team-a", FAIRNESS_ID_HEADER: "team-b", "Authorization": "Bearer k-123456"}
    assert tenant_of(both, HEADER, None) == "team-a"
    assert tenant_of({FAIRNESS_ID_HEADER: "team-b"}, HEADER, None) == "team-b"
    assert tenant_of({}, HEADER, None) == ANONYMOUS


def test_an_api_key_is_hashed_never_kept() -> None:
    key = "sk-secret-key-0123456789"
    tenant = tenant_of({"Authorization": f"Bearer {key}"}, HEADER, None)
    assert tenant.startswith("key-")
    assert len(tenant) == len("key-") + 12
    assert key not in tenant
    assert tenant == key_tenant(key, None)  # the same on every replica
    assert key_tenant(key, b"salt-1") != tenant  # keyed


@pytest.mark.parametrize("value", ["", "  ", "tab\there", "a\x85b", "x" * 257, "é" * 129, "\udcff"])
def test_a_bad_tenant_name_is_a_400_naming_the_header(value: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        tenant_of({HEADER: value}, HEADER, None)
    assert err.value.param == HEADER
    assert err.value.code == "invalid_tenant"


def test_labels_stay_bounded_when_every_request_names_a_new_tenant() -> None:
    labels = TenantLabels(top_n=3)
    seen = {labels.label(f"t{i}") for i in range(10_000)}
    assert len(seen - {OTHER}) <= 6  # at most 2 x top_n ever labelled
    assert len(labels.labelled()) <= 3


def test_the_busiest_tenants_keep_their_labels() -> None:
    labels = TenantLabels(top_n=2)
    for i in range(2_000):
        labels.label(f"one-off-{i}")  # noise first: takes the free labels early
        if i % 2 == 0:
            labels.label("big")
        if i % 4 == 0:
            labels.label("medium")
    assert labels.label("big") == "big"
    assert labels.label("medium") == "medium"
    assert labels.label("one-off-new") == OTHER


PRINCIPALS = [
    "auth0|5f3c2a1b9e8d7c6b5a4f3e2d",
    "john+ci@example.com",
    "spiffe://cluster.local/ns/prod/sa/batch-runner",
    "x" * 65,
    "é" * 128,  # 256 bytes of UTF-8
    "team a",
]


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_principal_shaped_ids_are_tenants_and_never_labels_raw(principal: str) -> None:
    """Issue 32: ids a gateway derives from a real principal were a 400 (1-64 of
    `[A-Za-z0-9._:@-]`); any printable id up to 256 bytes is now a tenant, and its metric
    label is a short hash."""
    assert tenant_of({HEADER: f" {principal} "}, HEADER, None) == principal
    assert tenant_of({FAIRNESS_ID_HEADER: principal}, HEADER, None) == principal
    label = TenantLabels(top_n=3).label(principal)
    assert label == label_of(principal)
    assert label.startswith(HASHED_PREFIX)
    assert len(label) == len(HASHED_PREFIX) + 12
    assert principal not in label


def test_plain_names_keep_their_own_label() -> None:
    for name in ("team-a", "key-0123456789ab", "acme.prod:eu@1"):
        assert TenantLabels(top_n=3).label(name) == name


def test_labels_and_memory_stay_bounded_with_long_ids() -> None:
    labels = TenantLabels(top_n=3)
    seen = {labels.label(f"{i:0256d}") for i in range(5_000)}
    assert len(seen - {OTHER}) <= 6
    assert all(s == OTHER or s.startswith(HASHED_PREFIX) for s in seen)
    assert len(labels._counts) <= 12  # the sketch: 4 x top_n ids at most


def test_peeking_at_a_label_counts_no_request() -> None:
    labels = TenantLabels(1)
    assert labels.label("busy") == "busy"
    assert labels.peek("busy") == "busy"
    assert labels.peek("quiet") == OTHER
    for _ in range(5):
        assert labels.peek("quiet") == OTHER  # peeks count nothing: "quiet" never passes
    assert labels.label("quiet") == OTHER  # "busy" (1) is not passed by "quiet" (1)
