"""Build-and-publish flows shared by the admin API and the CLI (one place for the sequence).

Adapter glue: reads stored profiles and policy, runs the pure build off the event loop, hands
the table to the publisher, and notes rejected builds in the status hash. A build carries the
accuracy demotions in force in the current table (`demotion.carry_demotions`) and publishes
compare-and-set on that table; when another was published meanwhile, the carry is redone on
it (a rebuild never drops a demotion published while it was building).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from contracts.policy import Policy
from contracts.profile_report import ProfileReport
from contracts.routing_table import PrunedPair
from control_plane.build.category_training import training_summary
from control_plane.build.table import BuildError, TableBuild, build
from control_plane.loop.demotion import carry_demotions
from control_plane.settings import BuildOptions
from control_plane.store.policy_store import PolicyStore
from control_plane.store.profile_store import ProfileStore
from control_plane.store.published_tables import PublishedTables
from control_plane.store.publisher import (
    BaseMovedError,
    PublishConflictError,
    Publisher,
    PublishResult,
)
from control_plane.store.stored_data import StoredDataError

logger = logging.getLogger(__name__)
PUBLISH_TRIES = 3  # carries redone when another table was published under a build


@dataclass(frozen=True, slots=True)
class Rebuild:
    """What one build-and-publish did."""

    publish: PublishResult
    entries: int
    pruned: tuple[PrunedPair, ...]
    warnings: tuple[str, ...]


class TableService:
    def __init__(
        self,
        profiles: ProfileStore,
        policies: PolicyStore,
        published: tuple[PublishedTables, Publisher],
        options: BuildOptions,
        clock: Callable[[], datetime],
    ) -> None:
        self._profiles = profiles
        self._policies = policies
        self._tables, self._publisher = published
        self._options = options
        self._clock = clock

    async def rebuild(self) -> Rebuild:
        """Build from every stored profile and the effective policy, then publish.

        Raises StoredDataError (a stored profile or policy no longer validates), BuildError
        (recorded as rejected), PublishError or RedisError. Nothing is published on error.
        """
        try:
            reports = await self._profiles.reports()
        except StoredDataError as err:
            await self._publisher.record_rejected(str(err))
            raise
        if not reports:
            error = BuildError(["profiles: none stored; push reports first"])
            await self._publisher.record_rejected(str(error))
            raise error
        policy = (await self._policies.get()).policy
        return await self.publish_reports(reports, policy)

    async def publish_reports(self, reports: Sequence[ProfileReport], policy: Policy) -> Rebuild:
        """Build from the given reports and policy, then publish (errors as for `rebuild`)."""
        made = await self.build(reports, policy)
        if made.table.classifier is not None:
            logger.info("%s", training_summary(made.table.classifier))
        result = await self._publish_carrying(made)
        return Rebuild(result, len(made.table.entries), made.table.pruned, made.warnings)

    async def _publish_carrying(self, made: TableBuild) -> PublishResult:
        """Publish `made` with the current table's demotions, on that table (compare-and-set),
        carrying again when another table was published meanwhile."""
        for _ in range(PUBLISH_TRIES - 1):
            try:
                return await self._publish_on_current(made)
            except (BaseMovedError, PublishConflictError):
                logger.info("the current table moved under a build; carrying again")
        return await self._publish_on_current(made)

    async def _publish_on_current(self, made: TableBuild) -> PublishResult:
        current = await self._tables.current()
        table = carry_demotions(made.table, current)
        return await self._publisher.publish(table, base=current.version if current else 0)

    async def build(self, reports: Sequence[ProfileReport], policy: Policy) -> TableBuild:
        """The pure build, in a worker thread (scipy fits take milliseconds per pair)."""
        try:
            return await asyncio.to_thread(
                build,
                list(reports),
                policy,
                self._clock(),
                allow_partial=self._options.allow_partial,
                prune=self._options.prune,
            )
        except BuildError as err:
            await self._publisher.record_rejected(str(err))
            raise
