"""run_async, the helper every client-side coroutine of these tests runs in: what a client
leaves unretrieved fails the test that ran it, not a later one in the same process (a CI run
failed test_txn_coordinator_shell on aiokafka futures an earlier zombie-fencing test left)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from integration.helpers import run_async


class Fenced(Exception):
    pass


async def _leave_a_failed_future() -> int:
    fut = asyncio.get_running_loop().create_future()
    fut.set_exception(Fenced("nobody awaits this"))
    # A reference cycle, as a client's sender task has: only the cycle collector frees it.
    holder: dict = {"fut": fut}
    holder["self"] = holder
    return 7


def test_an_unretrieved_exception_fails_the_run_that_left_it(caplog):
    with pytest.raises(AssertionError, match="Fenced"):
        run_async(_leave_a_failed_future())
    # ...and nothing is logged for a later test to trip over.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_test_can_name_what_its_clients_are_expected_to_leave():
    assert run_async(_leave_a_failed_future(), unretrieved_ok=("Fenced",)) == 7


def test_a_clean_coroutine_returns_its_result():
    async def clean() -> str:
        await asyncio.sleep(0)
        return "ok"

    assert run_async(clean()) == "ok"
