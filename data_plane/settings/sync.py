"""The knobs of the background work: Redis, the table watcher, engine scraping, live state,
endpoint discovery, breaker announcements, latency feedback and in-flight sharing."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator, model_validator

from contracts.knobs import Group
from contracts.redis_keys import DEFAULT_PREFIX, RedisKeys
from contracts.redis_topology import Topology, parse_redis_url


class RedisSettings(Group):
    """The Redis client, its key prefix, and the watcher's reconnect backoff cap."""

    url: str = Field(
        default="redis://127.0.0.1:6379/0",
        description="standalone, Sentinel or Cluster by the scheme: `redis://`, "
        '`redis+sentinel://`, `redis+cluster://` (docs/operations.md, "Redis topologies"); '
        '`""` = static mode: serve the snapshot file only',
    )
    key_prefix: str = Field(
        default=DEFAULT_PREFIX, description="prefix of every key (`contracts.redis_keys`)"
    )
    timeout_s: float = Field(
        default=2.0, gt=0.0, le=60.0, description="socket timeouts of the Redis client"
    )
    backoff_max_s: float = Field(
        default=10.0, gt=0.0, le=600.0, description="the table watcher's reconnect backoff cap"
    )

    @field_validator("key_prefix")
    @classmethod
    def _valid_prefix(cls, value: str) -> str:
        RedisKeys(value)  # raises ValueError naming the prefix
        return value

    @field_validator("url")
    @classmethod
    def _valid_url(cls, value: str) -> str:
        if value:
            parse_redis_url(value)  # raises ValueError saying what is wrong
        return value

    @property
    def topology(self) -> Topology:
        return parse_redis_url(self.url).topology if self.url else Topology.STANDALONE

    @property
    def keys(self) -> RedisKeys:
        return RedisKeys(self.key_prefix, cluster=self.topology is Topology.CLUSTER)


class TableSettings(Group):
    """Where the table comes from besides Redis pub/sub (`TableWatcher`)."""

    poll_interval_s: float = Field(
        default=5.0,
        gt=0.0,
        le=3600.0,
        description="how often `current` is polled besides pub/sub",
    )
    snapshot_path: Path | None = Field(
        default=None,
        description="local copy of the last good table (atomic rename); read at startup",
    )
    tokenizer_dir: Path | None = Field(
        default=None,
        description="where the tokenizer files the table names are found as `<sha256>.json` "
        "before the path the profiler recorded; a file whose SHA-256 differs is not used, "
        'nothing is fetched (see "Prompt size")',
    )
    tokenize_min_bytes: int = Field(
        default=8192,
        ge=0,
        description="a body this large or larger has its prompt counted by the alias's "
        "tokenizer, off the event loop, one count at a time (a body arriving while one runs, "
        'and smaller ones, are priced per character; see "Prompt size")',
    )


class ScrapeSettings(Group):
    """Engines' queue depth from their `/metrics` (0 = scraping off)."""

    interval_s: float = Field(
        default=1.0, ge=0.0, description="vLLM `/metrics` queue-depth scraping (`0` = off)"
    )
    timeout_s: float = Field(default=1.0, gt=0.0, le=60.0, description="one scrape, at most")
    max_page_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=64 * 1024,
        le=64 * 1024 * 1024,
        description="an engine's `/metrics` page past this is a scrape error (and an unread "
        'stall probe), never read further (see "Engine pages")',
    )


class LiveStateSettings(Group):
    """This replica's live state in Redis, for operators."""

    interval_s: float = Field(
        default=5.0, gt=0.0, description="how often the live state is written to Redis"
    )
    ttl_s: int = Field(default=30, ge=1, description="how long one write of it lives there")


class DiscoverySettings(Group):
    """Endpoints are pods (docs/data_plane.md, "Endpoint discovery"): engine URLs whose host
    is a name are re-resolved at this interval into one endpoint per address. 0 = off."""

    interval_s: float = Field(
        default=0.0,
        ge=0.0,
        le=3600.0,
        description="how often engine URLs whose host is a name are re-resolved into one "
        'endpoint per address (pod) (`0` = off; see "Endpoint discovery")',
    )
    dns_servers: str = Field(
        default="", description="`ADDRESS[:PORT],...` (empty = the system resolver)"
    )
    dns_timeout_s: float = Field(default=2.0, gt=0.0, le=60.0, description="one lookup, at most")
    max_addresses_per_name: int = Field(
        default=256,
        ge=1,
        le=10_000,
        description="a name with more addresses is served with the first this many (address order)",
    )

    @field_validator("dns_servers")
    @classmethod
    def _dns_servers(cls, value: str) -> str:
        parse_dns_servers(value)  # raises ValueError naming the bad entry
        return value

    @property
    def dns_server_list(self) -> list[tuple[str, int]]:
        return parse_dns_servers(self.dns_servers)


def parse_dns_servers(text: str) -> list[tuple[str, int]]:
    """`"10.0.0.10, 127.0.0.1:5353"` -> [(address, port)]; port 53 when not given."""
    servers = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep:
            host, port = item, "53"
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"DNS server {item!r} is not ADDRESS or ADDRESS:PORT")
        servers.append((host, int(port)))
    return servers


class AnnouncementSettings(Group):
    """Replicas eject together (docs/data_plane.md, "Breaker announcements"): an opened
    breaker is announced on Redis; the others skip the endpoint for its cooldown, at most
    `max_ttl_s`."""

    enabled: bool = Field(
        default=True,
        description="announce opened breakers to the other replicas and skip what they announce "
        '(see "Breaker announcements")',
    )
    max_ttl_s: float = Field(
        default=30.0,
        gt=0.0,
        le=600.0,
        description="an announced endpoint is skipped for its cooldown, at most this",
    )


class FeedbackSettings(Group):
    """Latency feedback summaries to Redis every `interval_s` (0 = off); probes of the pairs
    refits made slower every `probe_interval_s` (0 = off; docs/control_plane.md "Latency
    feedback"); accuracy probes of a demoted (pair, category) at most every
    `accuracy_probe_interval_s` (0 = off; docs/accuracy.md "Live checks")."""

    interval_s: float = Field(
        default=10.0,
        ge=0.0,
        le=3600.0,
        description="latency feedback summaries added to the Redis stream `dp:feedback` "
        '(`0` = off; docs/control_plane.md "Latency feedback")',
    )
    probe_interval_s: float = Field(
        default=2.0,
        ge=0.0,
        le=3600.0,
        description="probe each pair a refit made slower than its profile, so it can be refit "
        'back (`0` = off; docs/control_plane.md "Latency feedback")',
    )
    accuracy_probe_interval_s: float = Field(
        default=2.0,
        ge=0.0,
        le=3600.0,
        description="at most one accuracy check every this many seconds per demoted (pair, "
        "category), on sampled requests of the category another pair answered, reported as "
        "agreement (a lift needs canary items); within the policy's `accuracy_check` sample "
        'rate, hourly caps and one client\'s share (`0` = off; docs/accuracy.md "Live checks")',
    )
    # On by default; the sizing is docs/accuracy.md "Canary items": at 240 items a minute per
    # pair, a pair measured on five categories gets ~48 a minute in each, and a 15-point
    # drop from a 0.90 profile is demoted within 10 minutes (300 of 300 simulated runs at the
    # 207 a minute the capacity share leaves the example 70B pair, median 180 s: `make bench`
    # section 7). An item of the shipped set costs at most $1.7e-5 at the example 70B prices:
    # $0.16 an hour at that rate, within the $0.50.
    canary_items_per_minute: float = Field(
        default=240.0,
        ge=0.0,
        le=6000.0,
        description="canary items (held-out items with known answers) sent to each pair per "
        "minute by this replica, while feedback goes to Redis; 0 = off "
        '(docs/accuracy.md "Canary items")',
    )
    canary_usd_per_hour: float = Field(
        default=0.5,
        ge=0.0,
        le=1000.0,
        description="canary items' spend per pair per hour by this replica (reserved at an "
        "item's worst case before sending, settled from its usage)",
    )
    canary_capacity_share: float = Field(
        default=0.02,
        gt=0.0,
        le=1.0,
        description="canary items take at most this share of a pair's profiled output "
        "tokens a second (the table's sustained_output_tokens_per_s x its endpoints), split "
        "among the replicas sharing in-flight counts: each item's max_tokens count against "
        'it, and the pair\'s items are spaced out to fit (docs/accuracy.md "Canary items")',
    )
    canary_items_file: str = Field(
        default="",
        max_length=4096,
        description="eval-set JSON lines of canary items (the profiler's format: prompt or "
        "chat items); empty: the shipped held-out items, data_plane/checks/canary_items.jsonl",
    )


class InFlightShareSettings(Group):
    """Replicas exchange their in-flight counts per endpoint through Redis every
    `interval_ms` (docs/data_plane.md, "In-flight sharing"); a replica's counts are gone
    from the sums at most `ttl_s` after its last write. 0 = off."""

    interval_ms: int = Field(
        default=25,
        ge=0,
        le=10_000,
        description="exchange every that many ms while counts change (0 = sharing off)",
    )
    ttl_s: float = Field(
        default=1.0, gt=0.0, le=60.0, description="a replica's counts count that long"
    )
    max_interval_ms: int = Field(
        default=50,
        ge=0,
        le=10_000,
        description="the longest wait between exchanges while nothing changes (the wait "
        "doubles from interval_ms after each exchange that changed nothing; 0 = interval_ms)",
    )
    groups: int = Field(
        default=0,
        ge=0,
        le=256,
        description="endpoint groups, each on its own Redis hash slot (0 = 1 on a standalone "
        "Redis or Sentinel, 3 on a cluster; best a multiple of the cluster's masters); every "
        "replica of a fleet must use the same number",
    )
    refresh_s: float = Field(
        default=5.0,
        gt=0.0,
        le=300.0,
        description="unused since the in-flight sums (each replica adds its whole counts "
        "to every epoch, 0.8 x ttl_s); still accepted so that configurations setting it load",
    )

    @property
    def longest_ms(self) -> int:
        """The longest wait between exchanges."""
        return max(self.interval_ms, self.max_interval_ms)

    @model_validator(mode="after")
    def _ttl_covers_interval(self) -> InFlightShareSettings:
        if self.ttl_s * 1000 < self.longest_ms:
            raise ValueError(
                "in_flight_share_ttl_s must be >= in_flight_share_interval_ms and "
                "in_flight_share_max_interval_ms"
            )
        return self
