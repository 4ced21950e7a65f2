"""request/priority.py: X-Priority names one of the policy's classes."""

from __future__ import annotations

import pytest

from contracts.policy import Policy, PolicyError, PriorityClass, load_policy
from data_plane.errors import InvalidRequest
from data_plane.request.priority import priority_of


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
