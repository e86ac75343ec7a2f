"""What a RemoteStorageManager raises (Kafka's RemoteStorageException family).

Callers (the remote log manager's copier and deleter, the remote reader) catch
:class:`RemoteStorageError` and back off; the two subclasses are failures that trying again
will not fix, so the storage manager never retries them itself."""

from __future__ import annotations


class RemoteStorageError(Exception):
    """An object-store call failed (after its retries, for a transient failure)."""


class RemoteResourceNotFoundError(RemoteStorageError):
    """The object is absent (a deleted segment, a segment without a transaction index)."""


class RemoteChecksumError(RemoteStorageError):
    """Stored bytes do not match the CRC32C the segment's manifest recorded for them."""


class TransientStoreError(Exception):
    """A backend's failure that may pass (connection refused or reset, timeout, 5xx,
    throttling, the storage directory gone): the storage manager tries the call again. Never
    leaves the package: after the last try it becomes a RemoteStorageError."""
