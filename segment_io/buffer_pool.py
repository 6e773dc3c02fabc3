"""Large byte buffers used again once nothing holds them, instead of new ones from the kernel each time.

A buffer of tens of megabytes comes from the kernel as new pages, which the kernel zeroes on first touch: a
cleaning task that decompresses 200 MB of lz4 payloads into new buffers spends a tenth of its CPU zeroing pages
the codec then overwrites. A :class:`BufferPool` keeps the buffers it handed out; once no view, memoryview or
Arrow buffer refers to one any more (its reference count says so, exactly, in CPython), it hands it out again.
A buffer that anything still reads is never handed out twice.

What a pool keeps stays allocated in the process, up to its ``keep_bytes``, also between tasks: a Python
worker that runs cleaning tasks one after another reuses the previous task's buffers instead of faulting in
new ones.
"""

from __future__ import annotations

import sys

import numpy as np

#: Requests smaller than this are plain allocations: the C allocator already reuses its own memory for them.
MIN_POOLED_BYTES = 1 << 20
#: A free buffer serves a request of ``n`` bytes if it is at most this much larger (a caller that keeps the
#: buffer counts all of it, so a far larger one would hold memory the request does not need).
_SLACK = 1.25


class BufferPool:
    """Uninitialised ``uint8`` buffers, reused once no one holds them, at most ``keep_bytes`` kept at once."""

    def __init__(self, keep_bytes: int) -> None:
        self.keep_bytes = int(keep_bytes)
        self._buffers: list[np.ndarray] = []

    @property
    def kept_bytes(self) -> int:
        """Bytes of the buffers the pool keeps, held elsewhere or free."""
        return sum(buf.nbytes for buf in self._buffers)

    def _free(self) -> list[np.ndarray]:
        """The kept buffers nothing else refers to. What a free buffer's reference count reads here depends on
        the interpreter (the list, the loop's variable, the call's argument, each counted or not), so it is read
        off a probe that only the list holds, in the same expression as the others'."""
        self._buffers.append(np.empty(0, np.uint8))  # the probe: held by the list alone, as a free buffer is
        counts = [sys.getrefcount(buf) for buf in self._buffers]
        self._buffers.pop()
        free_count = counts.pop()
        return [buf for buf, count in zip(self._buffers, counts) if count <= free_count]

    def empty(self, n: int) -> np.ndarray:
        """``n`` uninitialised bytes: the first ``n`` of a kept buffer no one holds when one is about that size,
        else of a new one (kept while the pool has room)."""
        if n < MIN_POOLED_BYTES:
            return np.empty(n, np.uint8)
        free = self._free()
        fitting = [buf for buf in free if n <= buf.nbytes <= n * _SLACK]
        if fitting:
            return min(fitting, key=lambda buf: buf.nbytes)[:n]
        # make room by letting go of free buffers (none of them fits this request), the largest first
        by_size = sorted(free, key=lambda buf: buf.nbytes, reverse=True)
        sizes = [buf.nbytes for buf in by_size]
        excess, k = self.kept_bytes + n - self.keep_bytes, 0
        while excess > 0 and k < len(sizes):
            excess -= sizes[k]
            k += 1
        drop = {id(buf) for buf in by_size[:k]}
        del free, fitting, by_size
        self._buffers = [buf for buf in self._buffers if id(buf) not in drop]  # freed before the new one is made
        new = np.empty(n, np.uint8)
        if self.kept_bytes + n <= self.keep_bytes:
            self._buffers.append(new)
        return new

    def clear(self) -> None:
        """Let go of every kept buffer (those still held elsewhere live on with their holders)."""
        self._buffers = []


__all__ = ["MIN_POOLED_BYTES", "BufferPool"]
