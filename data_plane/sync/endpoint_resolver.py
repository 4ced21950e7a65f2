"""DNS for endpoint discovery (dnspython): a name -> the addresses (and ports) behind it.

A plain name (a headless Service, `vllm-fam-fp8.gearbox.svc`) gives its A records, each on
the URL's port; a name starting with `_` (`_http._tcp.vllm-fam-fp8.gearbox.svc`, the SRV
records Kubernetes publishes for a headless Service's named port) gives each SRV target's A
records on the target's port.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.resolver


@dataclass(frozen=True, slots=True, order=True)
class Target:
    address: str  # an IPv4 address
    port: int


class LookupFailedError(Exception):
    """The name could not be resolved now (timeout, server failure): keep what was known."""


class Resolver(Protocol):
    async def resolve(self, name: str, default_port: int) -> list[Target]:
        """The targets behind `name`, sorted; [] when the name has no records (NXDOMAIN or no
        answer); raises LookupFailedError when the answer is not known."""
        ...


class DnsResolver:
    """dnspython's asyncio resolver: the given servers, or the system's (/etc/resolv.conf,
    its search list included) when none are given."""

    def __init__(self, servers: Sequence[tuple[str, int]], timeout_s: float) -> None:
        if servers:
            resolver = dns.asyncresolver.Resolver(configure=False)
            resolver.nameservers = [dns.nameserver.Do53Nameserver(a, p) for a, p in servers]
        else:
            resolver = dns.asyncresolver.Resolver()
        resolver.lifetime = timeout_s
        self._resolver = resolver

    async def _records(self, name: str, kind: str) -> list[dns.resolver.Answer] | None:
        try:
            return [await self._resolver.resolve(name, kind, search=True)]
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return None
        except dns.exception.DNSException as err:
            raise LookupFailedError(f"{kind} {name}: {type(err).__name__}") from err

    async def _addresses(self, name: str, port: int) -> list[Target]:
        answers = await self._records(name, "A")
        if answers is None:
            return []
        return [Target(r.address, port) for r in answers[0]]

    async def resolve(self, name: str, default_port: int) -> list[Target]:
        if not name.startswith("_"):
            return sorted(set(await self._addresses(name, default_port)))
        answers = await self._records(name, "SRV")
        if answers is None:
            return []
        targets: set[Target] = set()
        for record in answers[0]:
            targets.update(await self._addresses(record.target.to_text(), record.port))
        return sorted(targets)
