"""request/priority.py: X-Priority names one of the policy's classes (read here through
`request.identity.identify` with the header trusted, so the class asked for is the one given;
who may ask for what is tests/unit/data_plane/test_identity.py)."""

from __future__ import annotations

import pytest

from contracts.policy import Policy, PolicyError, PriorityClass, load_policy
from data_plane.errors import InvalidRequest
from data_plane.request.identity import Rights, identify

_TRUSTED = Rights(priority_header_trusted=True)


def priority_of(headers: dict[str, str], policy: Policy) -> tuple[str, PriorityClass]:
    _, name, klass = identify(headers, policy, _TRUSTED)
    return name, klass


def test_x_priority_names_a_policy_class_and_defaults_to_the_policys() -> None:
    policy = Policy()
    assert priority_of({}, policy)[0] == "standard"
    critical = PriorityClass(share=1.0, sheddable=False)
    assert priority_of({"X-Priority": " Critical "}, policy) == ("critical", critical)
    with pytest.raises(InvalidRequest) as err:
        priority_of({"X-Priority": "urgent"}, policy)
    assert err.value.param == "X-Priority"
    assert "batch, critical, standard" in err.value.message


def test_the_default_class_must_be_one_the_policy_defines() -> None:
    with pytest.raises(PolicyError, match="default_priority 'gold' is not in priorities"):
        load_policy({"default_priority": "gold"})
    policy = load_policy({"priorities": {"gold": {"sheddable": False}}, "default_priority": "gold"})
    assert priority_of({}, policy) == ("gold", PriorityClass(share=1.0, sheddable=False))


OBJECTIVES = {
    "priorities": {
        "critical": {"sheddable": False},
        "standard": {},
        "batch": {"share": 0.5},
    },
    "objectives": {"premium-traffic": "critical", "offline": "batch"},
}


def test_the_objective_header_gives_the_class_the_policy_maps_it_to() -> None:
    policy = load_policy(OBJECTIVES)
    premium = {"x-llm-d-inference-objective": "premium-traffic"}
    assert priority_of(premium, policy)[0] == "critical"
    # The Gateway API Inference Extension's older name, as llm-d reads it too.
    assert priority_of({"x-gateway-inference-objective": "offline"}, policy)[0] == "batch"
    # llm-d's name wins over the old one, as in llm-d.
    both = {**premium, "x-gateway-inference-objective": "offline"}
    assert priority_of(both, policy)[0] == "critical"


def test_x_priority_wins_over_the_objective_header() -> None:
    policy = load_policy(OBJECTIVES)
    headers = {"X-Priority": "batch", "x-llm-d-inference-objective": "premium-traffic"}
    assert priority_of(headers, policy)[0] == "batch"


def test_an_objective_the_policy_does_not_map_gets_the_default_class() -> None:
    policy = load_policy(OBJECTIVES)
    for objective in ("unknown-objective", "Not A Name!", ""):
        assert priority_of({"x-llm-d-inference-objective": objective}, policy)[0] == "standard"
    # Without any mapping the header is not read at all.
    assert priority_of({"x-llm-d-inference-objective": "offline"}, Policy())[0] == "standard"


def test_an_objective_must_map_to_a_class_the_policy_defines() -> None:
    with pytest.raises(PolicyError, match=r"objectives\.premium: .gold. is not in priorities"):
        load_policy({"objectives": {"premium": "gold"}})
    with pytest.raises(PolicyError, match="objectives"):
        load_policy({"objectives": {"Not_A_K8s_Name": "batch"}})
