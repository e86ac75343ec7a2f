"""CRC-32C (Castagnoli), the checksum of Kafka's record batches: the ``crc32c`` package's C
function, loaded without running that package's ``__init__``.

Why: ``crc32c/__init__.py`` calls ``importlib.metadata.version("crc32c")`` at import, which
imports ``importlib.metadata`` (zipfile, email, csv, ...) and scans every ``sys.path`` entry
for distributions: 25-80 ms of every broker start-up (``python -X importtime``), for a
version string snakka never reads. The extension module ``crc32c._crc32c`` is found through
the package's spec (found, not executed) and loaded on its own; anything unexpected falls
back to the ordinary import, so the function is always the package's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def _load() -> Callable[..., int]:
    try:
        import importlib.machinery
        import importlib.util

        pkg = importlib.util.find_spec("crc32c")
        if pkg is not None and pkg.submodule_search_locations:
            for location in pkg.submodule_search_locations:
                finder = importlib.machinery.FileFinder(
                    location, (importlib.machinery.ExtensionFileLoader,
                               importlib.machinery.EXTENSION_SUFFIXES))
                spec = finder.find_spec("crc32c._crc32c")
                if spec is not None and spec.loader is not None:
                    module: Any = importlib.util.module_from_spec(spec)
                    spec.loader.exec_module(module)
                    fn: Callable[..., int] = module.crc32c
                    return fn
    except (ImportError, OSError, AttributeError):
        pass
    from crc32c import crc32c as fallback

    return fallback


crc32c = _load()

__all__ = ["crc32c"]
