"""Cooperative time slicing for long loops on the event loop.

No request may stall the loop for more than ~50 ms (ENGINEERING.md). A handler that walks
thousands of items (topics in a DeleteTopics, configs in a CreateTopics response) calls
``await slicer.tick()`` once per item: it yields to the loop only when the current slice has run
for ``budget_s``, so small requests never yield and large ones cost one loop turn per slice.
"""

from __future__ import annotations

import asyncio
import time

# Work done between two yields: well under the ~50 ms stall budget.
DEFAULT_SLICE_S = 0.02


class TimeSlice:
    def __init__(self, budget_s: float = DEFAULT_SLICE_S) -> None:
        self.budget_s = budget_s
        self._start = time.perf_counter()

    async def tick(self) -> None:
        """Yield to the event loop if this slice has used its budget."""
        if time.perf_counter() - self._start >= self.budget_s:
            await asyncio.sleep(0)
            self._start = time.perf_counter()
