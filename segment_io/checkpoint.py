"""Kafka's text checkpoint files: per-log-dir offset checkpoints and per-partition leader-epoch checkpoints.

Framing (Kafka's ``CheckpointFile``): a version line (``0``), an entry-count line, then one entry per line,
fields separated by a space, every line ended by the writer's line separator (``\\n``; ``\\r\\n`` on brokers
that ran on Windows). Offset checkpoints (``cleaner-offset-checkpoint``, ``log-start-offset-checkpoint``,
``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``) hold ``topic partition offset``
lines; ``leader-epoch-checkpoint`` holds ``epoch startOffset`` lines in epoch order.

Reading follows Kafka's reader: an empty file, or one that ends after the version line, means no entries
(brokers leave empty files behind); a wrong version, a malformed line or a count that differs from the
number of lines is an error (:class:`~segment_io.errors.CorruptCheckpointError`, naming file and line). Entry
lines split as Kafka's ``WHITE_SPACES_PATTERN.split`` does (Java's ``\\s+``: space, tab, vertical tab, form
feed; trailing empty fields dropped), so a line with trailing whitespace is read and one with leading whitespace
is not. A file holding NUL bytes (one a crash left preallocated or zero-filled) is refused, naming where they
start. A checkpoint that is not a regular file (a dangling symbolic link, a directory, a FIFO, ...) is refused
before it is opened (:func:`read_checkpoint_bytes`, which every reader here goes through).
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping, NamedTuple, Sequence

from segment_io.errors import CorruptCheckpointError, IrregularEntryError, NotFoundError
from segment_io.storage.base import KIND_DANGLING_SYMLINK, KIND_FILE, FileInfo, Storage

#: The only checkpoint version Kafka writes.
CHECKPOINT_VERSION = 0

# Java's BufferedReader.readLine ends a line at \n, \r or \r\n; str.splitlines would also split at
# characters Kafka treats as ordinary (form feed, \x1c, ...).
_LINE_END = re.compile(r"\r\n|\r|\n")
# Java's \s (Kafka splits entry lines on "\\s+"): ASCII whitespace only, unlike Python's \s, which also matches
# \x1c-\x1f, \x85, \xa0 and other Unicode spaces that Kafka keeps inside a field.
_FIELDS = re.compile(r"[ \t\n\x0b\f\r]+")
_INT = re.compile(r"[+-]?[0-9]+")
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
#: How much of a bad line or field an error message quotes.
QUOTE_CHARS = 80

TopicPartition = tuple[str, int]


class EpochEntry(NamedTuple):
    """One ``leader-epoch-checkpoint`` line: ``epoch`` led the partition from ``start_offset`` on."""

    epoch: int
    start_offset: int


# --------------------------------------------------------------------------------------------------
# Framing
# --------------------------------------------------------------------------------------------------


def _lines(text: str) -> list[str]:
    lines = _LINE_END.split(text)
    if lines and lines[-1] == "":  # the separator after the last line does not start another line
        lines.pop()
    return lines


def _quote(text: str) -> str:
    """``text`` quoted and escaped for an error message; past :data:`QUOTE_CHARS` characters, its start and its
    length (``'abc…'… (16384 bytes)``)."""
    if len(text) <= QUOTE_CHARS:
        return repr(text)
    return f"{text[:QUOTE_CHARS]!r}… ({len(text.encode('utf-8', 'surrogatepass'))} bytes)"


def _split_fields(line: str) -> list[str]:
    """Kafka's ``WHITE_SPACES_PATTERN.split(line)``: Java's ``String.split`` drops trailing empty fields (so
    ``"t 0 5 "`` has three) but keeps a leading one (``" t 0 5"`` has four)."""
    fields = _FIELDS.split(line)
    while fields and fields[-1] == "":
        fields.pop()
    return fields


def _refuse_nul_bytes(text: str, *, path: str | None) -> None:
    """A file holding NUL bytes is what a crash leaves of a file whose blocks were allocated but never written
    (preallocated, or zero-filled by the filesystem's recovery): say so, and where, rather than quote them."""
    at = text.find("\x00")
    if at < 0:
        return
    before = text[:at]
    line = len(_LINE_END.split(before))
    position = len(before.encode("utf-8", "surrogatepass"))
    rest = text[at:]
    nuls = rest.count("\x00")
    if nuls == len(rest):
        what = (f"the whole file is {nuls} NUL bytes" if at == 0
                else f"the file ends with {nuls} NUL bytes, from byte {position} on")
    else:
        what = f"the file holds {nuls} NUL byte(s), the first at byte {position}"
    raise CorruptCheckpointError(f"{what}: a file a crash left preallocated or zero-filled, not one a broker "
                                 f"finished writing", path=path, line=line)


def _parse_int(token: str, bounds: tuple[int, int], *, what: str, path: str | None, line: int) -> int:
    if not _INT.fullmatch(token):
        raise CorruptCheckpointError(f"{what} {_quote(token)} is not an integer", path=path, line=line)
    value = int(token)
    if not bounds[0] <= value <= bounds[1]:
        raise CorruptCheckpointError(f"{what} {value} is out of range", path=path, line=line)
    return value


def _entry_lines(text: str, *, path: str | None) -> list[tuple[int, str, list[str]]]:
    """(1-based line number, the line, its whitespace-separated fields) of each entry line, after checking the
    framing."""
    _refuse_nul_bytes(text, path=path)
    lines = _lines(text)
    if not lines:
        return []
    version = _parse_int(lines[0], _INT32, what="version", path=path, line=1)
    if version != CHECKPOINT_VERSION:
        raise CorruptCheckpointError(f"unknown checkpoint version {version} (expected {CHECKPOINT_VERSION})",
                                     path=path, line=1)
    if len(lines) == 1:
        return []
    expected = _parse_int(lines[1], _INT32, what="entry count", path=path, line=2)
    entries = [(n, line, _split_fields(line)) for n, line in enumerate(lines[2:], start=3)]
    blank = next((n for n, _, fields in entries if not fields), None)
    if blank is not None:  # named as such: a count that disagrees would blame the header of a file ending in one
        raise CorruptCheckpointError("the line is blank: a checkpoint holds one entry a line after its two "
                                     "header lines, and nothing else (a broker refuses it as a malformed line)",
                                     path=path, line=blank)
    if len(entries) != expected:
        raise CorruptCheckpointError(f"header declares {expected} entries but the file holds {len(entries)}",
                                     path=path, line=2)
    return entries


def _render(lines: Sequence[str], line_separator: str) -> str:
    return "".join(f"{line}{line_separator}" for line in [str(CHECKPOINT_VERSION), str(len(lines)), *lines])


def _irregular_detail(name: str, kind: str, local: str | None) -> str:
    what = kind
    if kind == KIND_DANGLING_SYMLINK and local is not None:
        import os

        try:
            what = f"{kind} (to {os.readlink(local)}, which does not exist: is its volume mounted?)"
        except OSError:
            pass
    return f"{name} is a {what}, not a regular file: it was not opened, and no broker could read it either"


def read_checkpoint_bytes(storage: Storage, uri: str, *, listed: FileInfo | None = None) -> bytes | None:
    """The bytes of the checkpoint file at ``uri``, or None when there is none. The one place checkpoints are
    opened: an entry that is there but is not a regular file (a dangling symbolic link, a directory, a FIFO, a
    socket, a device file) is an :class:`~segment_io.errors.IrregularEntryError` naming it and what it is,
    raised before anything opens it (a FIFO would block the read forever; a dangling link would read as no
    checkpoint, and a later write would replace the link with a file holding only that run's entries).

    On local disk the entry itself is looked at (a symbolic link to a regular file is fine); an object store
    holds only regular objects, but ``listed`` (the entry a listing found under that name, e.g. a "directory"
    of keys below it) is refused as well when it is not a file."""
    local = storage.local_path(uri)
    if local is not None:
        from segment_io.storage.local import path_kind

        kind = path_kind(local)
    else:
        kind = listed.kind if listed is not None else None
    if kind is not None and kind != KIND_FILE:
        raise IrregularEntryError(_irregular_detail(uri.rstrip("/").rsplit("/", 1)[-1], kind, local), uri=uri)
    try:
        return storage.read(uri)
    except NotFoundError:
        return None


def _read_text(storage: Storage, uri: str, listed: FileInfo | None = None) -> str | None:
    data = read_checkpoint_bytes(storage, uri, listed=listed)
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorruptCheckpointError(f"not UTF-8 text (byte {e.start})", path=uri) from None


# --------------------------------------------------------------------------------------------------
# Offset checkpoints
# --------------------------------------------------------------------------------------------------


def parse_offset_checkpoint(text: str, *, path: str | None = None) -> dict[TopicPartition, int]:
    """``{(topic, partition): offset}`` in file order. Raises :class:`CorruptCheckpointError`."""
    out: dict[TopicPartition, int] = {}
    for n, line, fields in _entry_lines(text, path=path):
        if len(fields) != 3 or not fields[0]:
            raise CorruptCheckpointError(f"expected 'topic partition offset', got {_quote(line)}",
                                         path=path, line=n)
        partition = _parse_int(fields[1], _INT32, what="partition", path=path, line=n)
        offset = _parse_int(fields[2], _INT64, what="offset", path=path, line=n)
        if (fields[0], partition) in out:
            raise CorruptCheckpointError(f"partition {fields[0]}-{partition} appears twice", path=path, line=n)
        out[(fields[0], partition)] = offset
    return out


def render_offset_checkpoint(entries: Mapping[TopicPartition, int], *, line_separator: str = "\n") -> str:
    """The checkpoint text for ``entries``, in the mapping's order.

    Kafka writes its in-memory map in whatever order that map iterates (no meaningful order); keeping the
    caller's order makes ``render(parse(text)) == text`` for any file a broker wrote.
    """
    for (topic, _), _ in entries.items():
        if not topic or _FIELDS.search(topic):
            raise ValueError(f"topic name {topic!r} cannot be written to a checkpoint file")
    return _render([f"{topic} {partition} {offset}" for (topic, partition), offset in entries.items()],
                   line_separator)


def read_offset_checkpoint(storage: Storage, uri: str, *, listed: FileInfo | None = None,
                           ) -> dict[TopicPartition, int]:
    """Parse the offset checkpoint at ``uri``; a missing file means no entries, one that is not a regular file
    is refused (:func:`read_checkpoint_bytes`, which ``listed`` is for)."""
    text = _read_text(storage, uri, listed)
    return {} if text is None else parse_offset_checkpoint(text, path=uri)


def write_offset_checkpoint(storage: Storage, uri: str, entries: Mapping[TopicPartition, int]) -> None:
    """Replace the offset checkpoint at ``uri`` atomically."""
    storage.write_atomic(uri, render_offset_checkpoint(entries).encode("utf-8"))


# --------------------------------------------------------------------------------------------------
# Leader-epoch checkpoints
# --------------------------------------------------------------------------------------------------


def parse_leader_epoch_checkpoint(text: str, *, path: str | None = None) -> list[EpochEntry]:
    """The entries of a ``leader-epoch-checkpoint``, in file order. Raises :class:`CorruptCheckpointError`, also for
    an entry with a negative epoch or start offset (Kafka's ``LeaderEpochFileCache`` refuses it on load)."""
    out: list[EpochEntry] = []
    for n, line, fields in _entry_lines(text, path=path):
        if len(fields) != 2:
            raise CorruptCheckpointError(f"expected 'epoch startOffset', got {_quote(line)}", path=path,
                                         line=n)
        entry = EpochEntry(_parse_int(fields[0], _INT32, what="epoch", path=path, line=n),
                           _parse_int(fields[1], _INT64, what="start offset", path=path, line=n))
        if entry.epoch < 0 or entry.start_offset < 0:
            # Kafka's formatter reads the line, but LeaderEpochFileCache refuses the entry as it loads it
            # (IllegalArgumentException "invalid partition leader epoch entry"): the partition does not load.
            raise CorruptCheckpointError(f"negative {'epoch' if entry.epoch < 0 else 'start offset'} in entry "
                                         f"{_quote(line)}: a broker refuses such an entry when it loads the "
                                         f"partition", path=path, line=n)
        out.append(entry)
    return out


def render_leader_epoch_checkpoint(entries: Iterable[EpochEntry | tuple[int, int]], *,
                                   line_separator: str = "\n") -> str:
    """The ``leader-epoch-checkpoint`` text for ``entries`` (kept in the given order: epoch order in Kafka)."""
    return _render([f"{epoch} {start}" for epoch, start in entries], line_separator)


def read_leader_epoch_checkpoint(storage: Storage, uri: str) -> list[EpochEntry]:
    """Parse the leader-epoch checkpoint at ``uri``; a missing file means no entries."""
    text = _read_text(storage, uri)
    return [] if text is None else parse_leader_epoch_checkpoint(text, path=uri)


def write_leader_epoch_checkpoint(storage: Storage, uri: str, entries: Iterable[EpochEntry | tuple[int, int]],
                                  ) -> None:
    """Replace the leader-epoch checkpoint at ``uri`` atomically."""
    storage.write_atomic(uri, render_leader_epoch_checkpoint(entries).encode("utf-8"))


def truncate_epochs_from_start(entries: Iterable[EpochEntry | tuple[int, int]], new_start_offset: int,
                               ) -> list[EpochEntry]:
    """Kafka's ``LeaderEpochFileCache.truncateFromStart``: what the cache holds once the log starts at
    ``new_start_offset``.

    Entries (in epoch order) are dropped from the front while their start offset is <= the new start; if
    any were dropped, the last of them (the epoch that was leading at the new start) comes back starting at
    ``new_start_offset``. Entries that start after the new start are untouched, so an entry starting
    exactly there is kept as it is.
    """
    items = [EpochEntry(int(e), int(s)) for e, s in entries]
    dropped = 0
    while dropped < len(items) and items[dropped].start_offset <= new_start_offset:
        dropped += 1
    if not dropped:
        return items
    return [EpochEntry(items[dropped - 1].epoch, new_start_offset), *items[dropped:]]


__all__ = [
    "CHECKPOINT_VERSION", "QUOTE_CHARS", "EpochEntry", "TopicPartition", "parse_offset_checkpoint",
    "read_checkpoint_bytes", "render_offset_checkpoint",
    "read_offset_checkpoint", "write_offset_checkpoint", "parse_leader_epoch_checkpoint",
    "render_leader_epoch_checkpoint", "read_leader_epoch_checkpoint", "write_leader_epoch_checkpoint",
    "truncate_epochs_from_start",
]
