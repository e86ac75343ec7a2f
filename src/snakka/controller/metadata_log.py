"""The metadata log's durability: appends now, fsyncs as a group commit off the event loop.

Owns when ``__cluster_metadata-0`` (metadata.store.MetadataStore) is fsynced. Every metadata change
is durable before the client that asked for it is answered (:meth:`MetadataLog.commit`); a burst
of changes shares fsyncs: one fsync runs at a time in a worker thread, and every caller that
arrives meanwhile waits for the next one. Coordinators that create their internal topic lazily
append now and wait later (:meth:`commit_soon`, :meth:`sync`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from snakka.metadata.store import MetadataStore

# One metadata record (metadata.core): a JSON object.
MetadataRecord = dict[str, Any]


class MetadataLog:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._sync_task: asyncio.Future[None] | None = None  # the group-commit task (fsyncs)
        self._sync_next: asyncio.Future[None] | None = None  # waiters of the next fsync

    def append(self, records: list[MetadataRecord]) -> None:
        """Append applied records without waiting for them to be durable."""
        self.store.append(records, sync=False)

    def append_prepared(self, batches: bytes) -> None:
        """Append batches ``store.prepare`` made (in a worker thread) for applied records,
        without waiting for them to be durable."""
        self.store.append_prepared(batches, sync=False)

    async def commit(self, records: list[MetadataRecord]) -> None:
        """Make applied metadata records durable (fsync off the loop) before answering."""
        self.store.append(records, sync=False)
        await self.sync()

    def commit_soon(self, records: list[MetadataRecord]) -> None:
        """Append records now and fsync them in the background; :meth:`sync` waits for
        durability when a caller needs it."""
        self.store.append(records, sync=False)
        self.synced()

    async def sync(self) -> None:
        """fsync everything appended so far (shared with concurrent callers)."""
        await asyncio.shield(self.synced())

    def synced(self) -> asyncio.Future[None]:
        """A future that resolves once everything appended so far is fsynced. Group commit:
        one fsync runs at a time, and every caller that arrives meanwhile shares the next."""
        if self._sync_next is None:
            self._sync_next = asyncio.get_running_loop().create_future()
            if self._sync_task is None or self._sync_task.done():
                self._sync_task = asyncio.ensure_future(self._sync_loop())
        return self._sync_next

    async def _sync_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._sync_next is not None:
            fut, self._sync_next = self._sync_next, None
            try:
                await loop.run_in_executor(None, self.store.sync)
            except Exception as e:  # noqa: BLE001 - handed to every waiter
                if not fut.done():
                    fut.set_exception(e)
                    fut.exception()  # retrieved: a waiter-less failure is not "never retrieved"
            else:
                if not fut.done():
                    fut.set_result(None)

    async def close(self) -> None:
        """Wait for a running fsync, then close the store."""
        if self._sync_task is not None:
            await asyncio.gather(self._sync_task, return_exceptions=True)
        self.store.close()
