"""Decompressed batch payloads kept from a decode for the encoder that rewrites the same batches.

A decode with value references (``value_refs``) leaves each value where it lies: in the segment's bytes for an
uncompressed batch, in the batch's decompressed payload for a compressed one. The encoder copies every kept
value from there; for a compressed batch it has to decompress the payload again, because the decoder let its
buffer go. In CPU time alone, in one process running task after task, keeping them saved up to a sixth of a zstd
cleaning task.

:class:`KeptPayloads` is where a decoder leaves those buffers instead, up to a byte budget, and where the encoder
looks for them (:func:`segment_io.encode.encode_batches`' ``payloads``): a batch whose payload is kept is not
decompressed again; one that is not (past the budget, or never offered) is, as before. The bytes written are
the same either way: a payload decompresses to the same bytes every time, and the references were made against
exactly these buffers.

Only a task cleaning a bin of small partitions together keeps them (:mod:`jobs.engine.compact.bin_cleaning`, at
most 32 MiB of input). A partition's task does not: keeping a group's payloads (up to the budget) held a second copy
of its records' bytes in new memory, and on the project's VMs first-touched memory costs the kernel more than the second
decompression does (``segjobs compact`` end to end 15-16% faster without it, lz4 and zstd; docs/performance.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: Default budget of :class:`KeptPayloads`: the most decompressed payloads one store keeps at once (256 MiB, counted
#: as allocated). A bin's input is at most 32 MiB, so its store keeps all of them; past the budget the encoder
#: decompresses again what it needs, part by part, as it does without a store.
DEFAULT_KEPT_PAYLOAD_BYTES = 256 << 20


@dataclass
class _SegmentPayloads:
    """The kept payloads of one segment: per batch (by its byte position in the segment), the buffer it was
    decompressed into and where in that buffer it lies."""

    positions: list[np.ndarray] = field(default_factory=list)
    buffers: list[np.ndarray] = field(default_factory=list)
    starts: list[np.ndarray] = field(default_factory=list)
    ends: list[np.ndarray] = field(default_factory=list)
    nbytes: int = 0


class KeptPayloads:
    """Decompressed payloads of compressed v2 batches, by segment and batch position, within a byte budget.

    A decoder :meth:`offer` s a buffer of payloads it decompressed; the store keeps it whole while the budget
    allows, else not at all. The encoder asks :meth:`locate` for the payloads of the batches it rewrites. A
    caller :meth:`drop` s a segment once its batches are written (or its decode is let go), which frees the budget
    for the next.
    """

    def __init__(self, budget_bytes: int | None = None) -> None:
        #: the most decompressed bytes kept at once (None: :data:`DEFAULT_KEPT_PAYLOAD_BYTES`)
        self.budget_bytes = DEFAULT_KEPT_PAYLOAD_BYTES if budget_bytes is None else budget_bytes
        self.held_bytes = 0
        self._segments: dict[int, _SegmentPayloads] = {}

    def offer(self, segment: int, positions: np.ndarray, buffer: np.ndarray, starts: np.ndarray,
              ends: np.ndarray) -> bool:
        """Keep ``buffer``, which holds the payloads of the batches at byte ``positions`` of segment ``segment``,
        each at ``buffer[starts[i]:ends[i]]``, if it fits in the budget. Returns whether it was kept. The budget
        counts what keeping it holds on to: the whole allocation ``buffer`` is a view of (a decoder's buffer is
        sized from what the frames may inflate to, more than they do)."""
        nbytes = buffer.base.nbytes if isinstance(buffer.base, np.ndarray) else buffer.nbytes
        if len(positions) == 0 or self.held_bytes + nbytes > self.budget_bytes:
            return False
        seg = self._segments.setdefault(int(segment), _SegmentPayloads())
        seg.positions.append(np.asarray(positions, np.int64))
        seg.buffers.append(buffer)
        seg.starts.append(np.asarray(starts, np.int64))
        seg.ends.append(np.asarray(ends, np.int64))
        seg.nbytes += nbytes
        self.held_bytes += nbytes
        return True

    def locate(self, segment: int, positions: np.ndarray) -> tuple[list[np.ndarray], np.ndarray, np.ndarray,
                                                                    np.ndarray]:
        """Where the kept payload of each batch at byte ``positions`` of segment ``segment`` lies: ``(buffers,
        which, starts, ends)``, batch ``i``'s payload being ``buffers[which[i]][starts[i]:ends[i]]`` (``which[i]``
        is -1 where none is kept)."""
        k = len(positions)
        which, starts, ends = np.full(k, -1, np.int64), np.zeros(k, np.int64), np.zeros(k, np.int64)
        seg = self._segments.get(int(segment))
        if seg is None or k == 0:
            return [], which, starts, ends
        wanted = np.asarray(positions, np.int64)
        for j, kept in enumerate(seg.positions):
            # a decoder offers its batches in file order: each buffer's positions are sorted
            at = np.minimum(np.searchsorted(kept, wanted), len(kept) - 1)
            hit = kept[at] == wanted
            which[hit], starts[hit], ends[hit] = j, seg.starts[j][at[hit]], seg.ends[j][at[hit]]
        return seg.buffers, which, starts, ends

    def drop(self, segment: int) -> None:
        """Let go of segment ``segment``'s payloads."""
        seg = self._segments.pop(int(segment), None)
        if seg is not None:
            self.held_bytes -= seg.nbytes

    def clear(self) -> None:
        """Let go of every payload."""
        self._segments.clear()
        self.held_bytes = 0


__all__ = ["DEFAULT_KEPT_PAYLOAD_BYTES", "KeptPayloads"]
