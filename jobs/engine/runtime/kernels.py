"""segjobs' compiled kernels (numba): which they are, and whether their compiled code is cached.

The decoder, the encoder, the key hash, the offset map and the transaction walk are compiled by numba the
first time they are called with given argument types, and cached on disk (``cache=True``: in a
``__pycache__`` directory beside each module, or numba's per-user cache directory when that one is not
writable; ``$NUMBA_CACHE_DIR`` overrides both). Compiling them all takes tens of seconds, the same machine's
later runs load them in milliseconds, and a local Spark session's Python workers run the same modules, so they
read the same cache. ``segjobs warm-up`` (:mod:`jobs.commands.warmup`, run by ``make venv``) compiles them at
install time; a job whose kernels are not cached says so before it starts, so that its first run is not
mistaken for slowness.
"""

from __future__ import annotations

import importlib
from typing import Any, Iterator

#: The modules that hold numba kernels.
KERNEL_MODULES = ("segment_io._decode_kernels", "segment_io._encode_kernels", "segment_io._crc_kernels",
                  "segment_io._lz4_kernels", "segment_io._zstd_kernels", "segment_io.hashing",
                  "segment_io.transactions", "segment_io.latest", "jobs.rules.offset_map", "jobs.rules.external_sort")

#: The progress line of a run that finds the kernels' cache cold.
COLD_NOTICE = ("compiling kernels (once): this install's decoders and encoders are not compiled yet, so this run "
               "compiles them first (about a minute; later runs load them in milliseconds). `segjobs warm-up` "
               "(which `make venv` runs) does it ahead of time")


def _dispatchers() -> Iterator[tuple[str, Any]]:
    """(qualified name, dispatcher) of every cached kernel defined in :data:`KERNEL_MODULES` that is compiled
    on its own (kernels inlined into their callers, ``inline="always"``, have no code of their own)."""
    from numba.core.registry import CPUDispatcher

    for module_name in KERNEL_MODULES:
        module = importlib.import_module(module_name)
        if not getattr(module, "HARDWARE", True) or not getattr(module, "LINKED", True):
            continue  # made of an instruction this processor lacks, or of a library not found: never compiled
        for name, obj in sorted(vars(module).items()):
            if (isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == module_name
                    and obj.targetoptions.get("inline", "never") == "never"
                    and getattr(obj, "_cache", None) is not None):
                yield f"{module_name}.{name}", obj


def _cached_signatures(dispatcher: Any) -> list[Any]:
    """The argument types of the compiled versions ``dispatcher``'s on-disk cache holds for the current source and
    for this process's target (CPU name and features): a cache shared with another machine, or filled before
    ``NUMBA_CPU_NAME``/``NUMBA_CPU_FEATURES`` changed, holds others, which this process would compile, not load.
    Raises when numba's internal cache layout is not what it reads."""
    index = dispatcher._cache._cache_file._load_index()  # empty when missing or stale
    target = dispatcher.targetctx.codegen().magic_tuple()
    return [key[0] for key in index if key[1] == target]


def cached_kernels() -> dict[str, int]:
    """Per kernel, how many compiled versions its on-disk cache holds for the current source and this process's
    target (0: none, the module changed since they were compiled, or they were compiled for another CPU)."""
    out = {}
    for name, dispatcher in _dispatchers():
        try:
            out[name] = len(_cached_signatures(dispatcher))
        except Exception:  # noqa: BLE001 - numba's cache layout is internal; unknown counts as cached
            out[name] = 1
    return out


def load_cached_kernels() -> int:
    """Load every compiled version the on-disk cache holds for the current source, as a first call with those
    argument types would (milliseconds each; nothing is compiled: a stale or missing cache holds none). Returns
    how many were loaded. For the worker daemon (:mod:`jobs.engine.runtime.worker_daemon`), so that the workers it
    forks start with them."""
    loaded = 0
    for _, dispatcher in _dispatchers():
        try:
            signatures = _cached_signatures(dispatcher)
        except Exception:  # noqa: BLE001 - numba's cache layout is internal: its first call loads it as before
            continue
        for signature in signatures:
            try:
                dispatcher.compile(signature)
            except Exception:  # noqa: BLE001 - likewise
                continue
            loaded += 1
    return loaded


def mostly_cold(counts: dict[str, int]) -> bool:
    """Whether most kernels of ``counts`` (:func:`cached_kernels`) have no cached code: a fresh install, a cleared
    cache, sources changed since the warm-up, or a cache only a light job has filled (retention's header walk
    compiles a few). A run then spends most of a minute compiling."""
    return bool(counts) and sum(1 for v in counts.values() if v) < len(counts) / 2


def kernels_cold() -> bool:
    """Whether a run would compile kernels first (:func:`mostly_cold`). A kernel that only rare inputs need (legacy
    message sets, say) is compiled when first met either way, in well under a second."""
    return mostly_cold(cached_kernels())


__all__ = ["COLD_NOTICE", "KERNEL_MODULES", "cached_kernels", "kernels_cold", "mostly_cold"]
