"""A tiered partition read as one log: which segments to read, and which offsets of each, so that every offset
the partition holds is read once. Pure: a function of the replayed remote log metadata
(:mod:`jobs.rules.remote_log`), the remote store's objects, the local segments and the log dir's checkpoints.

The rules, by offsets (Kafka's fetch serves an offset below the local log's start from remote storage, every
other offset from the local log):

- only COPY_SEGMENT_FINISHED segments are read; one outside the partition's leader-epoch lineage is not (judged
  as the audit judges it, :func:`jobs.rules.tiered_audit.lineage_problem`: Kafka never serves it);
- **local wins**: every local segment is read whole; a remote segment contributes only the offsets below the
  first local segment's base offset: wholly below it, it is read whole; overlapping it, only its offsets below
  it are kept; starting at or above it, it is skipped (the local segments hold those offsets);
- between remote segments, the later-starting one wins from its start offset (Kafka looks an offset up in the
  remote segment with the greatest start offset at or below it): an earlier segment keeps only the offsets
  below the next one's start, and one that starts where another does gives way to the one copied later;
- a finished segment that is kept but whose segment object is absent, or not of the size the metadata records,
  cannot be read: the plan names it (segment id, offsets, the object's path) and the partition is not read.

The plan is an ordered list of :class:`SegmentSource`: each a segment's files (local, or the remote segment's
objects as a :class:`~segment_io.layout.SegmentFiles`) and the offsets to keep. Readers read the sources in
order and drop the records outside each one's range.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

from jobs.rules.remote_log import RemoteSegment
from jobs.rules.tiered_audit import outside_lineage
from segment_io.layout import SegmentFiles

if TYPE_CHECKING:
    from segment_io.remote_layout import RemoteLayout

#: why a finished remote segment is not read, in the words of the reports
COVERED_LOCALLY = "the local segments hold its offsets (local wins)"
SUPERSEDED = "a remote segment starting at the same offset was copied later"


@dataclass(frozen=True)
class SegmentSource:
    """One segment to read and the offsets of it to keep (``keep_last`` None: to its end)."""

    files: SegmentFiles
    keep_first: int
    keep_last: int | None = None
    #: the finished remote segment this is; None for a local segment
    remote: RemoteSegment | None = None

    @property
    def base_offset(self) -> int:
        return self.files.base_offset

    @property
    def uri(self) -> str:
        return self.files.log.uri

    @property
    def is_remote(self) -> bool:
        return self.remote is not None

    @property
    def trimmed(self) -> bool:
        """Whether only part of a remote segment's offsets are kept."""
        return self.remote is not None and self.keep_last is not None and self.keep_last < self.remote.end_offset

    def describe(self) -> str:
        """``remote segment <id> (offsets a-b[, keeping a-c])`` or ``local segment <base>``, for reports."""
        if self.remote is None:
            return f"local segment {self.base_offset}"
        seg = self.remote
        keep = f", keeping {self.keep_first}-{self.keep_last}" if self.trimmed else ""
        return f"remote segment {seg.segment_id} (offsets {seg.start_offset}-{seg.end_offset}{keep})"


@dataclass(frozen=True)
class SkippedSegment:
    """A finished remote segment the plan does not read, and why."""

    segment: RemoteSegment
    reason: str


@dataclass(frozen=True)
class UnreadableSegment:
    """A finished remote segment the plan must read but cannot: its segment object is absent or of another size
    than the metadata records. ``uri``: where the layout keeps the object (None when it cannot say)."""

    segment: RemoteSegment
    problem: str
    uri: str | None

    def message(self) -> str:
        seg = self.segment
        where = f" ({self.uri})" if self.uri else ""
        return (f"remote segment {seg.segment_id} (offsets {seg.start_offset}-{seg.end_offset}): its segment "
                f"object{where} is {self.problem}: the partition cannot be read as one log (restore the object, "
                f"see segjobs tiered audit)")


@dataclass(frozen=True)
class TieredLogPlan:
    """What to read of one partition, in offset order; ``unreadable`` non-empty: the partition cannot be read."""

    sources: tuple[SegmentSource, ...]
    skipped: tuple[SkippedSegment, ...] = ()
    unreadable: tuple[UnreadableSegment, ...] = ()

    @property
    def remote_sources(self) -> tuple[SegmentSource, ...]:
        return tuple(s for s in self.sources if s.is_remote)

    def error(self) -> str | None:
        """Why the partition cannot be read (every unreadable segment), or None."""
        return "; ".join(u.message() for u in self.unreadable) or None


def local_only(segments: Sequence[SegmentFiles]) -> TieredLogPlan:
    """The plan of a partition with no finished remote segment: its local segments, whole."""
    return TieredLogPlan(tuple(SegmentSource(s, s.base_offset) for s in segments))


def _unreadable(seg: RemoteSegment, files: SegmentFiles | None, layout: "RemoteLayout",
                root: str) -> UnreadableSegment | None:
    if files is None:
        suffix = layout.segment_suffix() or ".log"
        return UnreadableSegment(seg, "absent", layout.object_uri(root, seg.metadata, suffix))
    if files.log.size != seg.size_bytes:
        return UnreadableSegment(seg, f"{files.log.size} bytes, the metadata says {seg.size_bytes}", files.log.uri)
    return None


def plan_tiered_log(finished: Sequence[RemoteSegment], local: Sequence[SegmentFiles],
                    remote_files: Mapping[str, SegmentFiles], *, layout: "RemoteLayout", root: str,
                    log_start: int | None = None, log_end: int | None = None,
                    epochs: Sequence[tuple[int, int]] = ()) -> TieredLogPlan:
    """The sources to read of one partition (see the module docstring): ``finished`` its COPY_SEGMENT_FINISHED
    segments, ``local`` its local segments in offset order, ``remote_files`` the objects of its remote segments
    that have a segment object, by segment id (as ``layout`` found them under ``root``), and what the log dir says:
    ``log_start`` its log-start-offset checkpoint's entry, ``log_end`` the local log's end, ``epochs`` its
    leader-epoch lineage."""
    outside = outside_lineage(finished, log_start=log_start, log_end=log_end, epochs=epochs)
    skipped = [SkippedSegment(s, outside[s.segment_id]) for s in finished if s.segment_id in outside]
    local_first = local[0].base_offset if local else None
    candidates: list[RemoteSegment] = []
    for seg in sorted((s for s in finished if s.segment_id not in outside), key=lambda s: (s.start_offset,
                                                                                          s.first_event)):
        if local_first is not None and seg.start_offset >= local_first:
            skipped.append(SkippedSegment(seg, COVERED_LOCALLY))
        elif candidates and candidates[-1].start_offset == seg.start_offset:
            skipped.append(SkippedSegment(candidates.pop(), SUPERSEDED))
            candidates.append(seg)
        else:
            candidates.append(seg)
    sources: list[SegmentSource] = []
    unreadable: list[UnreadableSegment] = []
    for i, seg in enumerate(candidates):
        following = candidates[i + 1].start_offset if i + 1 < len(candidates) else local_first
        keep_last = seg.end_offset if following is None else min(seg.end_offset, following - 1)
        files = remote_files.get(seg.segment_id)
        problem = _unreadable(seg, files, layout, root)
        if problem is not None:
            unreadable.append(problem)
        elif files is not None:
            sources.append(SegmentSource(files, seg.start_offset, keep_last, seg))
    sources += local_only(local).sources
    return TieredLogPlan(tuple(sources), tuple(sorted(skipped, key=lambda s: s.segment.start_offset)),
                         tuple(unreadable))


__all__ = ["COVERED_LOCALLY", "SUPERSEDED", "SegmentSource", "SkippedSegment", "TieredLogPlan", "UnreadableSegment",
           "local_only", "outside_lineage", "plan_tiered_log"]
