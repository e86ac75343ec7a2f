"""Long-poll wait lists: futures parked under keys (a topic-partition, a share-partition), woken
when something happens to one of their keys.

A wait list is a plain ``dict[key, list[Future]]`` owned by whoever produces the events (the
broker for appends, the share-partition manager for records that became available again). One
waiter may park under keys of several wait lists at once; it is removed from all of them when
it is woken, times out or is cancelled, so wait lists never grow without bound.

Also :func:`cancel_and_wait`, how the shells stop their background tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable, Sequence

WaitList = dict[Hashable, list[asyncio.Future]]


def wake(waiters: WaitList, key: Hashable) -> None:
    """Resolve every future parked under ``key``."""
    for f in waiters.pop(key, ()):
        if not f.done():
            f.set_result(None)


async def wait_any(lists: Sequence[tuple[WaitList, Iterable[Hashable]]], timeout_s: float) -> bool:
    """Park under the given keys of the given wait lists until one is woken (True) or the
    timeout passes (False)."""
    fut = asyncio.get_running_loop().create_future()
    parked = [(waiters, list(keys)) for waiters, keys in lists]
    for waiters, keys in parked:
        for k in keys:
            waiters.setdefault(k, []).append(fut)
    try:
        await asyncio.wait_for(asyncio.shield(fut), timeout_s)
        return True
    except TimeoutError:
        return False
    finally:
        for waiters, keys in parked:
            for k in keys:
                lst = waiters.get(k)
                if lst is not None:
                    try:
                        lst.remove(fut)
                    except ValueError:
                        pass
                    if not lst:
                        del waiters[k]


async def cancel_and_wait(tasks: Iterable[asyncio.Future]) -> None:
    """Cancel ``tasks`` and wait until each has finished, whatever it ends with (stopping: a
    task's own failure was logged by it, and a cancellation is what was asked for)."""
    tasks = list(tasks)
    for t in tasks:
        t.cancel()
    for t in tasks:
        try:
            await t
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
            pass
