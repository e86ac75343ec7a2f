"""An embedded snakka broker for tests: in-process (a thread) or a subprocess.

    from snakka.testing import EmbeddedBroker

    with EmbeddedBroker() as broker:            # ephemeral port, temporary data dir
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers})

The broker listens on ``localhost`` (127.0.0.1 and ::1, one ephemeral port) and advertises
``localhost:<port>``. ``mode="subprocess"`` runs ``python -m snakka serve`` in a child process,
which also allows ``kill()`` (SIGKILL) for crash tests; ``restart()`` keeps the data directory.

The pytest plugin (snakka.testing.pytest_plugin, registered automatically when snakka is
installed) provides the fixtures ``snakka_broker`` (one broker per test) and
``snakka_broker_factory`` (make several, with configs).

``EmbeddedBroker(authorizer=...)`` (thread mode) runs the broker's requests through the given
:class:`~snakka.security.authorizer.Authorizer` instead of allowing everything: tests of the
handlers' authorization checks inject a table-driven one.
"""

from snakka.testing.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
