"""request/tenant.py and telemetry/tenants.py: who a request is, and bounded labels."""

from __future__ import annotations

import pytest

from data_plane.errors import InvalidRequest
from data_plane.request.tenant import ANONYMOUS, FAIRNESS_ID_HEADER, key_tenant, tenant_of
from data_plane.telemetry.tenants import OTHER, TenantLabels

HEADER = "x-gearbox-tenant"


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


@pytest.mark.parametrize("value", ["", "has space", "x" * 65, "ünicode", "-lead"])
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
