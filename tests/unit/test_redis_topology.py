"""Redis URLs name a topology (contracts/redis_topology.py): standalone as before, Sentinel and
Cluster by their schemes; a bad URL is a startup error that says what is wrong."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from contracts.redis_topology import Topology, parse_redis_url
from control_plane.settings import ControlPlaneSettings
from data_plane.settings import DataPlaneSettings


@pytest.mark.parametrize(
    "url",
    ["redis://127.0.0.1:6379/0", "rediss://:pw@cache.example:6380/2", "unix:///tmp/redis.sock"],
)
def test_standalone_urls_are_read_as_before(url: str) -> None:
    target = parse_redis_url(url)
    assert (target.topology, target.nodes, target.url) == (Topology.STANDALONE, (), url)


def test_a_sentinel_url_lists_the_sentinels_the_service_and_the_db() -> None:
    target = parse_redis_url("redis+sentinel://:s3cret@10.0.0.1:26379,10.0.0.2,[::1]:5000/cache/3")
    assert target.topology is Topology.SENTINEL
    assert target.nodes == (("10.0.0.1", 26379), ("10.0.0.2", 26379), ("::1", 5000))
    assert (target.service_name, target.db) == ("cache", 3)
    assert target.connection["password"] == "s3cret"
    assert "ssl" not in target.connection
    assert target.sentinel_password is None


def test_tls_and_the_sentinels_own_password_come_from_the_url() -> None:
    url = "rediss+sentinel://app:pw@s1:1,s2:2/main?sentinel_password=spw&ssl_cert_reqs=none"
    target = parse_redis_url(url)
    assert (target.connection["ssl"], target.connection["ssl_cert_reqs"]) == (True, "none")
    assert (target.connection["username"], target.sentinel_password) == ("app", "spw")
    assert target.db == 0


def test_a_cluster_url_lists_seed_nodes_with_database_0() -> None:
    target = parse_redis_url("rediss+cluster://:pw@n1:7000,n2:7001")
    assert target.topology is Topology.CLUSTER
    assert target.nodes == (("n1", 7000), ("n2", 7001))
    assert (target.connection["ssl"], target.db) == (True, 0)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:6379", "must start with one of"),
        ("127.0.0.1:6379", "no scheme"),
        ("redis+sentinel://s1:26379", "service name"),
        ("redis+sentinel://s1:26379/main/x", "database 'x' is not a number"),
        ("redis+sentinel://s1:port/main", "'s1:port' is not host:port"),
        ("redis+sentinel://s1:26379,,s2/main", "'' is not host:port"),
        ("redis+cluster://n1:70000", "port 1-65535"),
        ("redis+cluster://n1:7000/3", "database 0 only"),
        ("redis+cluster://n1:7000?sentinel_password=x", "redis+sentinel:// URLs only"),
        ("redis://h:1/0?socket_timeout=soon", "socket_timeout"),
    ],
)
def test_a_bad_url_says_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_redis_url(url)


def test_the_password_is_never_in_the_error() -> None:
    with pytest.raises(ValueError, match="service name") as caught:
        parse_redis_url("redis+sentinel://:hunter2-secret@s1:26379")
    assert "hunter2" not in str(caught.value)


def test_both_planes_reject_a_bad_url_at_startup_naming_the_knob() -> None:
    for make in (ControlPlaneSettings, DataPlaneSettings):
        with pytest.raises(ValidationError, match=r"(?s)redis.url.*service name"):
            make.model_validate({"redis_url": "redis+sentinel://s1:26379"})


def test_only_a_cluster_tags_the_table_keys() -> None:
    for make in (ControlPlaneSettings, DataPlaneSettings):
        assert make.model_validate({"redis_url": "redis+cluster://n1:7000"}).redis.keys.cluster
        assert not make.model_validate({"redis_url": "redis+sentinel://s1/main"}).redis.keys.cluster
        assert not make.model_validate({"redis_url": "redis://127.0.0.1:6379/0"}).redis.keys.cluster
    assert not DataPlaneSettings.model_validate(
        {"redis_url": ""}
    ).redis.keys.cluster  # no Redis: snapshot only
