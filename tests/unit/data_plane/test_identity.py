"""request/identity.py: priority and tenant by right (issue 32, finding 3).

Each test named `..._cannot_...` failed on 95376ca, where `X-Priority` was taken as sent and
the tenant header won over the API key's tenant.
"""

from __future__ import annotations

import pytest

from contracts.policy import Policy, load_policy
from data_plane.client_keys import KeyGrant, key_digest
from data_plane.errors import InvalidRequest
from data_plane.request.identity import Rights, identify
from data_plane.request.priority import at_most
from data_plane.request.tenant import FAIRNESS_ID_HEADER, key_tenant

HEADER = "x-gearbox-tenant"
POLICY = load_policy(
    {
        "priorities": {"critical": {"sheddable": False}, "standard": {}, "batch": {"share": 0.5}},
        "objectives": {"premium-traffic": "critical", "offline": "batch"},
    }
)
PLAIN = "plain-key-0001"
ACME = "acme-key-00001"
GATEWAY = "gateway-key-001"
BATCHY = "batchy-key-0001"
GRANTS = {
    key_digest(PLAIN): KeyGrant(),
    key_digest(ACME): KeyGrant("acme", frozenset({"critical"}), "standard"),
    key_digest(GATEWAY): KeyGrant("edge", trusted_gateway=True),
    key_digest(BATCHY): KeyGrant("batchy", default_priority="batch"),
}
KEYED = Rights(HEADER, None, GRANTS)


def _as(key: str, **headers: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {key}",
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }


def test_a_client_without_the_right_cannot_raise_its_class() -> None:
    for rights in (Rights(), KEYED):
        headers = _as(PLAIN, X_Priority="critical")
        assert identify(headers, POLICY, rights).priority == "standard"
        # Lowering is always allowed.
        assert identify(_as(PLAIN, X_Priority="batch"), POLICY, rights).priority == "batch"
        assert identify(_as(PLAIN), POLICY, rights).priority == "standard"


def test_a_trusted_priority_header_may_raise_the_class() -> None:
    rights = Rights(priority_header_trusted=True)
    found = identify({"X-Priority": "critical"}, POLICY, rights)
    assert (found.priority, found.klass.sheddable) == ("critical", False)


def test_an_unknown_class_is_still_a_400_naming_the_header() -> None:
    with pytest.raises(InvalidRequest) as err:
        identify(_as(ACME, X_Priority="urgent"), POLICY, KEYED)
    assert err.value.param == "X-Priority"


def test_a_key_may_use_the_classes_it_is_granted_and_its_default() -> None:
    assert identify(_as(ACME, X_Priority="critical"), POLICY, KEYED).priority == "critical"
    assert identify(_as(BATCHY), POLICY, KEYED).priority == "batch"
    # Above its default and not granted: its default.
    assert identify(_as(BATCHY, X_Priority="standard"), POLICY, KEYED).priority == "batch"
    assert identify(_as(BATCHY, X_Priority="critical"), POLICY, KEYED).priority == "batch"


def test_a_default_class_the_policy_lacks_falls_back_to_the_policys() -> None:
    rights = Rights(grants={key_digest(PLAIN): KeyGrant(default_priority="gold")})
    assert identify(_as(PLAIN), POLICY, rights).priority == "standard"


def test_a_key_holder_cannot_become_another_tenant() -> None:
    for named in ({HEADER: "victim"}, {FAIRNESS_ID_HEADER: "victim"}):
        headers = {**_as(ACME), **named}
        assert identify(headers, POLICY, KEYED).tenant == "acme"
        plain = {**_as(PLAIN), **named}
        assert identify(plain, POLICY, KEYED).tenant == key_tenant(PLAIN, None)
    # A key holder's malformed tenant header is not read, so not a 400 either.
    assert identify({**_as(ACME), HEADER: ""}, POLICY, KEYED).tenant == "acme"


def test_a_trusted_gateways_key_speaks_for_its_principal() -> None:
    principal = "auth0|5f3c2a1b9e8d7c6b5a4f3e2d"
    found = identify(_as(GATEWAY, x_gearbox_tenant=principal, X_Priority="critical"), POLICY, KEYED)
    assert (found.tenant, found.priority) == (principal, "critical")
    fairness = {**_as(GATEWAY), FAIRNESS_ID_HEADER: "spiffe://cluster.local/ns/a/sa/b"}
    assert identify(fairness, POLICY, KEYED).tenant == "spiffe://cluster.local/ns/a/sa/b"
    assert identify(_as(GATEWAY), POLICY, KEYED).tenant == "edge"  # no header: its own


def test_without_keys_the_tenant_header_is_read_as_sent() -> None:
    found = identify({HEADER: "john+ci@example.com"}, POLICY, Rights())
    assert found.tenant == "john+ci@example.com"
    # A token no grant knows (gateway mode checks no keys): as without keys.
    unknown = {**_as("not-a-known-key"), HEADER: "team-a"}
    assert identify(unknown, POLICY, KEYED).tenant == "team-a"


def test_the_objective_header_sets_the_class_only_from_the_gateway() -> None:
    premium = {"x-llm-d-inference-objective": "premium-traffic"}
    offline = {"x-llm-d-inference-objective": "offline"}
    # The HTTP data plane: a client's claim, which may lower its class only.
    assert identify(premium, POLICY, Rights()).priority == "standard"
    assert identify(offline, POLICY, Rights()).priority == "batch"
    # Gateway mode: the gateway's, it sets the default class; X-Priority may lower it only.
    gateway = Rights(objective_trusted=True)
    assert identify(premium, POLICY, gateway).priority == "critical"
    assert identify({**premium, "X-Priority": "batch"}, POLICY, gateway).priority == "batch"
    raised = {**offline, "X-Priority": "critical"}
    assert identify(raised, POLICY, gateway).priority == "batch"
    # A trusted gateway's key: the objective is its too.
    assert identify({**_as(GATEWAY), **premium}, POLICY, KEYED).priority == "critical"


def test_classes_rank_by_never_shed_then_share() -> None:
    p = Policy().priorities
    assert at_most(p["batch"], p["standard"])
    assert at_most(p["standard"], p["critical"])
    assert not at_most(p["critical"], p["standard"])
    assert at_most(p["standard"], p["standard"])


def test_an_undecodable_token_is_no_key_and_no_500() -> None:
    """aiohttp decodes a header's non-UTF-8 bytes as lone surrogates."""
    headers = {"Authorization": "Bearer \udcff\udcfe-token"}
    found = identify(headers, POLICY, KEYED)
    assert found.tenant.startswith("key-")
    assert found.priority == "standard"
