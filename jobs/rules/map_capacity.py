"""How many keys an offset map of a given size holds: Kafka's ``SkimpyOffsetMap`` sizing, apart from the map
itself (:mod:`jobs.rules.offset_map`, compiled with numba) so that the command line can state it in ``--help``
and check ``--dedupe-buffer-bytes`` without loading the compiler.
"""

from __future__ import annotations

import math

from jobs.rules.kafka_defaults import DEDUPE_BUFFER_LOAD_FACTOR
from segment_io.errors import ConfigError

#: Bytes one map entry takes: a 16-byte key hash (the size of Kafka's MD5) and an 8-byte offset.
BYTES_PER_ENTRY = 24
#: Kafka's log.cleaner.io.buffer.load.factor (dupBufferLoadFactor, default 0.9): the map is "full" at this fill
#: ratio. segjobs uses Kafka's default and offers no option to change it.
LOAD_FACTOR = DEDUPE_BUFFER_LOAD_FACTOR


def max_keys_for_buffer(dedupe_buffer_bytes: int, *, load_factor: float = LOAD_FACTOR) -> int:
    """Keys a map of ``dedupe_buffer_bytes`` may hold: ``int(slots * load_factor)`` with 24-byte slots, as Kafka
    (``slots = memory / bytesPerEntry`` in SkimpyOffsetMap, ``maxDesiredMapSize = (slots * dupBufferLoadFactor)
    .toInt`` in the cleaner): 5,033,164 keys in the default 128 MiB, about 39,000 per MiB.

    Raises :class:`ConfigError` when not even one key fits (Kafka refuses such a cleaner, requiring
    ``slots * load factor > 1``: it would never make progress), naming the smallest buffer that maps one.
    """
    slots = dedupe_buffer_bytes // BYTES_PER_ENTRY
    max_keys = int(slots * load_factor)
    if max_keys < 1:
        raise ConfigError(f"log.cleaner.dedupe.buffer.size={dedupe_buffer_bytes} holds {slots} "
                          f"slot{'' if slots == 1 else 's'} of {BYTES_PER_ENTRY} bytes: too small to map even one key "
                          f"(at least "
                          f"{buffer_bytes_for_keys(1, load_factor=load_factor)} bytes)")
    return max_keys


def buffer_bytes_for_keys(keys: int, *, load_factor: float = LOAD_FACTOR) -> int:
    """The smallest buffer whose map holds ``keys`` keys: the inverse of :func:`max_keys_for_buffer` (a map of
    that many bytes holds exactly ``keys``), e.g. 300,000 bytes (12,500 slots) for 11,250 keys."""
    if keys < 1:
        raise ValueError(f"a map holds at least one key, asked for {keys}")
    slots = math.ceil(keys / load_factor)
    # the division and the product round in floating point: settle on the exact smallest slot count
    while int(slots * load_factor) < keys:
        slots += 1
    while slots > 1 and int((slots - 1) * load_factor) >= keys:
        slots -= 1
    return slots * BYTES_PER_ENTRY


#: The smallest buffer whose map holds one key (48 bytes: two slots, full at the load factor's 0.9 of them): the
#: least ``--dedupe-buffer-bytes`` takes.
MIN_BUFFER_BYTES = buffer_bytes_for_keys(1)

__all__ = ["BYTES_PER_ENTRY", "LOAD_FACTOR", "MIN_BUFFER_BYTES", "buffer_bytes_for_keys", "max_keys_for_buffer"]
