"""pytest fixtures for testing against a real snakka broker (auto-registered plugin).

- ``snakka_broker``: a fresh in-process broker per test; ``.bootstrap_servers`` for clients.
- ``snakka_broker_factory``: ``factory(config={...}, mode="subprocess")`` makes more brokers;
  all are closed (and their temporary data removed) when the test ends.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


def _rewrite_only_this_plugin() -> None:
    """Keep pytest's assertion rewriting off the broker's own modules.

    pytest marks every package of a distribution that declares a ``pytest11`` entry point
    for assertion rewriting, so without this every snakka module imported in a test run
    (hundreds of generated protocol modules) is parsed with ``ast.parse`` and rewritten.
    That costs import time in users' test runs and, worse, the embedded broker imports
    handler and message modules lazily on its own thread: two threads in ``ast.parse`` at
    once hit a CPython 3.11 bug ("AST constructor recursion depth mismatch", gh-106905,
    seen in CI). Only this module has fixtures whose asserts matter to users; the hook's
    marked set is private API, so a pytest without it is left as it is.
    """
    global REWRITE_LIMITED
    for finder in sys.meta_path:
        marked = getattr(finder, "_must_rewrite", None)
        mark_rewrite = getattr(finder, "mark_rewrite", None)
        if isinstance(marked, set) and "snakka" in marked and callable(mark_rewrite):
            marked.discard("snakka")
            mark_rewrite(__name__)  # public; also clears the hook's lookup cache
            REWRITE_LIMITED = True


# Whether pytest had marked the whole package and this plugin narrowed it. pytest before 9.2
# does not see the package of an editable install (setuptools' import-hook .pth) and marks
# nothing, so there is nothing to narrow.
REWRITE_LIMITED = False
_rewrite_only_this_plugin()

from snakka.testing.embedded import EmbeddedBroker  # noqa: E402  (after the rewrite limit)


@pytest.fixture
def snakka_broker_factory() -> Iterator:
    made: list[EmbeddedBroker] = []

    def factory(**kwargs) -> EmbeddedBroker:
        b = EmbeddedBroker(**kwargs).start()
        made.append(b)
        return b

    yield factory
    for b in made:
        b.close()


@pytest.fixture
def snakka_broker(snakka_broker_factory) -> EmbeddedBroker:
    return snakka_broker_factory()
