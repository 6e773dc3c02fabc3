"""Packing many small work items (partitions) into a few tasks by bytes: a pure function.

A Spark task costs tens of milliseconds of its own (scheduling, shipping the closure, a Python worker's
turn) whatever it does; compacting a 150 KB partition costs about as much. A log dir of thousands of small
partitions run as one task per partition spends most of its time on that overhead, so small partitions go
into bins of roughly ``target_bytes`` each, one task per bin, while a big partition still gets a task of its
own. The bins also bound how much work one progress line waits for: results are reported bin by bin.
"""

from __future__ import annotations

import heapq
from typing import Sequence

#: Default bytes of input per bin: large enough that a task's fixed cost is a few percent of its work
#: (tasks read at a few hundred MB/s), small enough that progress lines come every second or so.
DEFAULT_TARGET_BYTES = 64 << 20

#: Default most items per bin: a bin's results come back together, so this bounds how many progress
#: lines (and commits) wait for the slowest partition of a bin.
DEFAULT_MAX_ITEMS = 256


def pack_by_bytes(sizes: Sequence[int], *, target_bytes: int = DEFAULT_TARGET_BYTES,
                  max_items: int = DEFAULT_MAX_ITEMS, min_bins: int = 1) -> list[list[int]]:
    """Indices of ``sizes`` grouped into bins (each a list of indices, ascending), heaviest bin first.

    The number of bins is the largest of ``ceil(total / target_bytes)``, ``ceil(n / max_items)`` and
    ``min_bins`` (so every core gets work), never more than there are items. Items are placed heaviest first
    into the lightest bin so far (longest-processing-time-first: no bin ends up more than one item heavier
    than needed); an item of ``target_bytes`` or more therefore lands in a bin of its own whenever there are
    enough bins. No bin holds more than ``max_items``. Ties go to the lower index, so the result depends only
    on the input. Zero-size items count as one byte: even an empty partition costs a little. Empty bins are
    dropped.
    """
    if target_bytes <= 0 or max_items <= 0 or min_bins <= 0:
        raise ValueError(f"target_bytes ({target_bytes}), max_items ({max_items}) and min_bins ({min_bins}) "
                         f"must be positive")
    if any(s < 0 for s in sizes):
        raise ValueError("sizes must not be negative")
    n = len(sizes)
    if n == 0:
        return []
    weights = [max(int(s), 1) for s in sizes]
    total = sum(weights)
    count = max(-(-total // target_bytes), -(-n // max_items), min_bins)
    count = min(count, n)
    # (bytes so far, items so far, bin number): the lightest bin first, then the emptiest, then the lowest
    heap = [(0, 0, b) for b in range(count)]
    bins: list[list[int]] = [[] for _ in range(count)]
    loads = [0] * count
    for i in sorted(range(n), key=lambda i: (-weights[i], i)):
        load, items, b = heapq.heappop(heap)
        bins[b].append(i)
        loads[b] = load + weights[i]
        if items + 1 < max_items:  # a full bin leaves the heap: count * max_items >= n leaves room for all
            heapq.heappush(heap, (loads[b], items + 1, b))
    order = sorted(range(count), key=lambda b: (-loads[b], b))
    return [sorted(bins[b]) for b in order if bins[b]]


def pack_in_order(sizes: Sequence[int], *, target_bytes: int = DEFAULT_TARGET_BYTES,
                  max_items: int = DEFAULT_MAX_ITEMS, min_bins: int = 1) -> list[list[int]]:
    """Indices of ``sizes`` cut into consecutive runs (bins), in order: ``[[0, 1, 2], [3], [4, 5], ...]``.

    For work whose results are used in item order (commits in partition order): the bins finish roughly in
    order, so results can be used as soon as every earlier one is in. A bin takes items while it stays within
    ``min(target_bytes, total / min_bins)`` bytes (so there are at least about ``min_bins`` bins for the cores
    to share) and ``max_items`` items; an item bigger than that gets a bin of its own. Zero-size items count as
    one byte.
    """
    if target_bytes <= 0 or max_items <= 0 or min_bins <= 0:
        raise ValueError(f"target_bytes ({target_bytes}), max_items ({max_items}) and min_bins ({min_bins}) "
                         f"must be positive")
    if any(s < 0 for s in sizes):
        raise ValueError("sizes must not be negative")
    weights = [max(int(s), 1) for s in sizes]
    limit = min(target_bytes, max(1, -(-sum(weights) // min_bins)))
    bins: list[list[int]] = []
    load = 0
    for i, w in enumerate(weights):
        if not bins or len(bins[-1]) >= max_items or load + w > limit:
            bins.append([])
            load = 0
        bins[-1].append(i)
        load += w
    return bins


__all__ = ["DEFAULT_MAX_ITEMS", "DEFAULT_TARGET_BYTES", "pack_by_bytes", "pack_in_order"]
