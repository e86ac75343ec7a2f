"""The local-directory backend: objects as files under ``rsm.config.storage.root``.

For tests, a NAS mount, or a single machine that wants its history on another disk. Object
key ``a/b.log`` is the file ``<root>/a/b.log``.

Atomic like an object store: a file is written under a temporary name
(``<name>.tmp-<random>``), fsynced, renamed to its name and its directory fsynced, so a crash
never leaves a half object under its final name (what a crash leaves is a ``.tmp-`` file that
nothing reads and the segment's deletion removes). Directories are created on demand, but
never the root itself: a root that is not there (an unmounted NAS) is an outage, retried
like a store that does not answer, not a reason to write into the mount point.

Thread-safe: every write has its own temporary file, reads are positional (``pread``).
"""

from __future__ import annotations

import os
import shutil
import uuid

from snakka.remote.storage.errors import (
    RemoteResourceNotFoundError,
    RemoteStorageError,
    TransientStoreError,
)

_TMP = ".tmp-"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalDirectoryStore:
    """An :class:`~snakka.remote.storage.objects.ObjectStore` in a directory."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.description = f"directory {self.root}"

    # ------------------------------------------------------------------ paths

    def _path(self, key: str) -> str:
        parts = key.split("/")
        if any(p in ("", ".", "..") for p in parts):
            raise RemoteStorageError(f"object key {key!r} is not a relative path")
        return os.path.join(self.root, *parts)

    def _unavailable(self, what: str, exc: OSError) -> Exception:
        """The error for a failed ``what``: an absent root is an outage (transient)."""
        if not os.path.isdir(self.root):
            return TransientStoreError(f"{what}: storage root {self.root} is not there")
        if isinstance(exc, FileNotFoundError):
            return RemoteResourceNotFoundError(f"{what}: no such object")
        return TransientStoreError(f"{what}: {exc}")

    def _ensure_dir(self, directory: str) -> None:
        if os.path.isdir(directory):
            return
        if not os.path.isdir(self.root):
            raise TransientStoreError(f"storage root {self.root} is not there")
        created = []
        d = directory
        while not os.path.isdir(d) and d != self.root:
            created.append(d)
            d = os.path.dirname(d)
        os.makedirs(directory, exist_ok=True)
        # The new directories' entries must survive a crash with the files put in them.
        for c in created:
            _fsync_dir(os.path.dirname(c))

    def _commit(self, tmp: str, dest: str) -> None:
        os.replace(tmp, dest)
        _fsync_dir(os.path.dirname(dest))

    # ------------------------------------------------------------------ ObjectStore

    def put_file(self, key: str, path: str, size: int) -> None:
        dest = self._path(key)
        tmp = f"{dest}{_TMP}{uuid.uuid4().hex}"
        try:
            src = open(path, "rb")  # noqa: SIM115 (closed below; its errors are not transient)
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {path} for upload: {exc}") from exc
        try:
            with src:
                self._ensure_dir(os.path.dirname(dest))
                with open(tmp, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                    dst.flush()
                    if dst.tell() != size:
                        raise RemoteStorageError(
                            f"{path} changed during upload ({dst.tell()} bytes, {size} expected)")
                    os.fsync(dst.fileno())
            self._commit(tmp, dest)
        except OSError as exc:
            self._discard(tmp)
            raise self._unavailable(f"write {key}", exc) from exc
        except BaseException:
            self._discard(tmp)
            raise

    def put_bytes(self, key: str, data: bytes) -> None:
        dest = self._path(key)
        tmp = f"{dest}{_TMP}{uuid.uuid4().hex}"
        try:
            self._ensure_dir(os.path.dirname(dest))
            with open(tmp, "wb") as dst:
                dst.write(data)
                dst.flush()
                os.fsync(dst.fileno())
            self._commit(tmp, dest)
        except OSError as exc:
            self._discard(tmp)
            raise self._unavailable(f"write {key}", exc) from exc

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError as exc:
            raise self._unavailable(f"read {key}", exc) from exc

    def get_range(self, key: str, start: int, end: int) -> bytes:
        try:
            fd = os.open(self._path(key), os.O_RDONLY)
        except OSError as exc:
            raise self._unavailable(f"read {key}", exc) from exc
        try:
            parts = []
            pos = start
            while pos < end:
                piece = os.pread(fd, end - pos, pos)
                if not piece:
                    break
                parts.append(piece)
                pos += len(piece)
            return b"".join(parts)
        except OSError as exc:
            raise self._unavailable(f"read {key}", exc) from exc
        finally:
            os.close(fd)

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError as exc:
            if not os.path.isdir(self.root):
                raise TransientStoreError(
                    f"delete {key}: storage root {self.root} is not there") from exc
        except OSError as exc:
            raise self._unavailable(f"delete {key}", exc) from exc
        # What a crash during a write of this object left behind.
        directory, name = os.path.split(path)
        try:
            debris = [n for n in os.listdir(directory) if n.startswith(name + _TMP)]
        except OSError:
            return
        for n in debris:
            self._discard(os.path.join(directory, n))

    def close(self) -> None:
        pass

    @staticmethod
    def _discard(path: str) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass
