"""decision/endpoints.py and the pure half of sync/endpoint_discovery.py: a table served with
one endpoint per discovered pod (docs/data_plane.md, "Endpoint discovery")."""

from __future__ import annotations

import asyncio
import random

from data_plane.decision.choose import choose_route
from data_plane.decision.endpoints import with_endpoints
from data_plane.domain import (
    Budget,
    CompiledEndpoint,
    CompiledTable,
    HealthView,
    RequestFacts,
    RouteRequest,
)
from data_plane.sync.endpoint_discovery import EndpointDiscovery, discoverable_name, expand
from data_plane.sync.endpoint_resolver import Target
from data_plane.table_store import TableStore
from tests.support.waiting import eventually
from tests.unit.data_plane.tables import fleet

PODS = (
    CompiledEndpoint("llama@fp8#0/10.0.0.7:8000", "http://10.0.0.7:8000/llama-fp8"),
    CompiledEndpoint("llama@fp8#0/10.0.0.8:8000", "http://10.0.0.8:8000/llama-fp8"),
    CompiledEndpoint("llama@fp8#0/10.0.0.9:8000", "http://10.0.0.9:8000/llama-fp8"),
)


def test_every_view_of_a_pair_gets_its_new_endpoints() -> None:
    table = with_endpoints(fleet(), {"llama@fp8": PODS})
    (fp8,) = [p for p in table.pairs if p.pair == "llama@fp8"]
    assert fp8.endpoints == PODS
    assert table.by_alias["llama"][1] is fp8
    assert table.by_alias["llama@fp8"] == (fp8,)
    row = next(r for r in table.scan_rows["auto"] if r.pair is fp8)
    assert row.endpoint_ids == tuple(e.id for e in PODS)
    assert row.swapped == PODS[::-1]
    assert table.more_precise["llama@awq-int4"] is fp8
    untouched = [p for p in table.pairs if p.pair != "llama@fp8"]
    assert untouched == [p for p in fleet().pairs if p.pair != "llama@fp8"]


def test_routing_sees_the_pods_and_their_load() -> None:
    table = with_endpoints(fleet(), {"llama@fp8": PODS})
    facts = RequestFacts("llama@fp8", "chat", 0.5, 100, 10)
    load = {PODS[0].id: 3.0, PODS[1].id: 0.0, PODS[2].id: 5.0}
    decision = choose_route(
        table, RouteRequest(facts, Budget()), HealthView(load=load), random.Random(1)
    )
    chosen = decision.candidates[0].endpoints  # type: ignore[union-attr]
    assert set(chosen) <= set(PODS)
    assert PODS[2] != chosen[0]  # power of two choices never starts with the busiest of two


def test_only_http_names_are_discovered() -> None:
    assert discoverable_name("http://vllm-a.ns.svc:8000/x") == ("vllm-a.ns.svc", 8000)
    assert discoverable_name("http://vllm-a.ns.svc/x") == ("vllm-a.ns.svc", 80)
    assert discoverable_name("http://10.0.0.1:8000/") is None
    assert discoverable_name("https://vllm-a.ns.svc:8443/") is None


def test_expand_replaces_a_resolved_name_and_keeps_the_rest() -> None:
    table = fleet()
    base = {p.pair: p.endpoints for p in table.pairs}
    named = "http://vllm.test:8000/v"
    pair = table.pairs[0]
    table = with_endpoints(table, {pair.pair: (CompiledEndpoint("x#0", named),)})
    endpoints, origin = expand(
        table, {("vllm.test", 8000): [Target("10.1.0.1", 8000), Target("10.1.0.2", 9000)]}
    )
    assert endpoints[pair.pair] == (
        CompiledEndpoint("x#0/10.1.0.1:8000", "http://10.1.0.1:8000/v"),
        CompiledEndpoint("x#0/10.1.0.2:9000", "http://10.1.0.2:9000/v"),
    )
    name = ("vllm.test", 8000)
    assert origin == {"x#0/10.1.0.1:8000": name, "x#0/10.1.0.2:9000": name}
    for other in table.pairs[1:]:
        assert endpoints[other.pair] == base[other.pair]
    unresolved, _ = expand(table, {name: []})
    assert unresolved[pair.pair] == (CompiledEndpoint("x#0", named),)


class CountingResolver:
    """A Resolver that answers one pod per name and counts lookups."""

    def __init__(self) -> None:
        self.lookups: list[str] = []

    async def resolve(self, name: str, default_port: int) -> list[Target]:
        self.lookups.append(name)
        return [Target("10.9.0.1", default_port)]


async def test_a_new_table_is_resolved_at_once_not_at_the_next_tick() -> None:
    source, served = TableStore(), TableStore()
    resolver = CountingResolver()
    discovery = EndpointDiscovery(
        source, served, resolver, lambda ids: None, interval_s=3600, max_per_name=8
    )
    pair = fleet().pairs[0]

    def named(host: str) -> CompiledTable:
        return with_endpoints(
            fleet(), {pair.pair: (CompiledEndpoint("n#0", f"http://{host}:8000/"),)}
        )

    def served_ids() -> list[str]:
        assert served.current is not None
        (served_pair,) = [p for p in served.current.pairs if p.pair == pair.pair]
        return [e.id for e in served_pair.endpoints]

    source.swap(named("first.test"))
    task = asyncio.create_task(discovery.run())
    try:
        await eventually(lambda: served_ids() == ["n#0/10.9.0.1:8000"], timeout_s=5)
        # The loop now waits an hour for its next tick; a new table wakes it.
        source.swap(named("second.test"))
        await eventually(lambda: resolver.lookups[-1:] == ["second.test"], timeout_s=5)
        await eventually(lambda: served_ids() == ["n#0/10.9.0.1:8000"], timeout_s=5)
        assert resolver.lookups == ["first.test", "second.test"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
