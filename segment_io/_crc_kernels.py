"""CRC-32C (Castagnoli) of many byte spans in one compiled call, with the processor's CRC32 instruction.

Every v2 batch carries a CRC-32C of its bytes from the attributes to its end. The ``crc32c`` package computes one
span quickly, but called from Python once per batch it costs a microsecond or more beyond the CRC itself, which
for batches of Kafka's default ``batch.size`` (16 KB) is as much again as the CRC. These kernels take every span
of a segment at once and run the CRC32 instruction (SSE 4.2 on x86-64) over each in three interleaved streams,
whose partial CRCs are joined with precomputed shift tables: the three streams keep the instruction's pipeline
full (one result per cycle against one per three for a single stream), as the fast software CRC-32C
implementations do.

:data:`HARDWARE` says whether this process may use them: on another processor, or when numba is told to compile
for features without the instruction (``NUMBA_CPU_FEATURES``), it is not there and callers use the ``crc32c``
package span by span (:mod:`segment_io.crc`); nothing here is compiled then.
"""

from __future__ import annotations

import platform
import struct

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

#: CRC-32C's polynomial, bit-reflected.
POLY = 0x82F63B78
_MASK = 0xFFFFFFFF
#: Bytes per stream of the long and the short interleaved blocks.
LONG = 8192
SHORT = 256


def _hardware() -> bool:
    """Whether numba compiles for a processor with the CRC32 instruction: a 64-bit x86 process whose target
    features, as numba chooses them (``NUMBA_CPU_FEATURES`` when set, else the host's), include it. Without it LLVM
    cannot compile the kernels (a fatal error, not an exception), so any doubt says no."""
    try:
        if platform.machine().lower() not in ("x86_64", "amd64") or struct.calcsize("P") != 8:
            return False
        from numba.core import codegen, config

        configured = getattr(config, "CPU_FEATURES", None)
        features = set((configured if configured is not None else codegen.get_host_cpu_features()).split(","))
        # LLVM 14 and later name the instruction's own feature; SSE 4.2 implies it unless it is turned off
        return "+crc32" in features or ("+sse4.2" in features and "-crc32" not in features)
    except Exception:  # noqa: BLE001 - an unknown answer is a no
        return False


HARDWARE = _hardware()


def _multiply(a: int, b: int) -> int:
    """``a`` times ``b`` modulo the polynomial, both bit-reflected (bit 31 is x^0)."""
    product, m = 0, 1 << 31
    while True:
        if a & m:
            product ^= b
            if a & (m - 1) == 0:
                return product
        m >>= 1
        b = (b >> 1) ^ POLY if b & 1 else b >> 1


def _x_to_the_bits_of(n_bytes: int) -> int:
    """x^(8 n) modulo the polynomial: appending ``n_bytes`` zero bytes to a CRC register multiplies it by this."""
    power, result, bits = 1 << 30, 1 << 31, 8 * n_bytes  # x^1, x^0
    while bits:
        if bits & 1:
            result = _multiply(power, result)
        power = _multiply(power, power)
        bits >>= 1
    return result


def shift_table(n_bytes: int) -> np.ndarray:
    """The (4, 256) int64 table of the linear map "append ``n_bytes`` zero bytes" on a raw CRC register, one
    row per register byte: the map of a register ``c`` is the XOR of ``table[k, (c >> 8k) & 255]``."""
    op = _x_to_the_bits_of(n_bytes)
    basis = np.array([_multiply(op, 1 << bit) for bit in range(32)], np.int64)
    n = np.arange(256)
    table = np.zeros((4, 256), np.int64)
    for k in range(4):
        for j in range(8):
            table[k] ^= np.where((n >> j) & 1, basis[8 * k + j], 0)
    return table


LONG_SHIFT = shift_table(LONG)
SHORT_SHIFT = shift_table(SHORT)


def _crc_instruction(builder, crc, value, width: int):
    """The CRC32 instruction over the ``width``-bit little-endian ``value`` from the 64-bit register ``crc``."""
    i64, ival = ir.IntType(64), ir.IntType(width)
    if width == 64:
        name, reg = "llvm.x86.sse42.crc32.64.64", i64
    else:  # the 8-, 16- and 32-bit forms take and give a 32-bit register
        name, reg = f"llvm.x86.sse42.crc32.32.{width}", ir.IntType(32)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(reg, [reg, ival]), name)
    result = builder.call(fn, [crc if reg is i64 else builder.trunc(crc, reg), value])
    return result if reg is i64 else builder.zext(result, i64)


def _crc_step(width: int):
    """An intrinsic ``(crc, buf, pos) -> crc``: the CRC32 instruction over the ``width`` bits at ``buf[pos]``
    (unaligned)."""

    @intrinsic
    def step(typingctx, crc, buf, pos):
        sig = types.int64(types.int64, buf, types.intp)

        def codegen(context, builder, signature, args):
            crc_v, buf_v, pos_v = args
            array = context.make_array(signature.args[1])(context, builder, buf_v)
            at = builder.bitcast(builder.gep(array.data, [pos_v]), ir.IntType(width).as_pointer())
            return _crc_instruction(builder, crc_v, builder.load(at, align=1), width)

        return sig, codegen

    return step


_crc_word = _crc_step(64)  # 8 bytes
_crc_byte = _crc_step(8)


@njit(cache=True, inline="always")
def _shift(table: np.ndarray, crc: int) -> int:
    return (table[0, crc & 0xFF] ^ table[1, (crc >> 8) & 0xFF] ^ table[2, (crc >> 16) & 0xFF]
            ^ table[3, (crc >> 24) & 0xFF])


@njit(cache=True, inline="always")
def _interleaved(buf: np.ndarray, p: int, end: int, crc: int, block: int, table: np.ndarray) -> tuple[int, int]:
    """Whole runs of three ``block``-byte blocks from ``p``, each block its own stream; the register after them
    and the position reached."""
    while end - p >= 3 * block:
        c0, c1, c2 = crc, np.int64(0), np.int64(0)
        q, stop = p, p + block
        while q < stop:
            c0 = _crc_word(c0, buf, q)
            c1 = _crc_word(c1, buf, q + block)
            c2 = _crc_word(c2, buf, q + 2 * block)
            q += 8
        # the register after the first block, moved past the second and joined with it, then the third
        crc = _shift(table, _shift(table, c0) ^ c1) ^ c2
        p += 3 * block
    return crc, p


@njit(cache=True, inline="always")
def span_crc(buf: np.ndarray, start: int, end: int, long_shift: np.ndarray, short_shift: np.ndarray) -> int:
    """CRC-32C of ``buf[start:end]``, as ``crc32c.crc32c`` gives it."""
    crc, p = _interleaved(buf, start, end, np.int64(_MASK), LONG, long_shift)
    crc, p = _interleaved(buf, p, end, crc, SHORT, short_shift)
    while end - p >= 8:
        crc = _crc_word(crc, buf, p)
        p += 8
    while p < end:
        crc = _crc_byte(crc, buf, p)
        p += 1
    return crc ^ _MASK


@njit(cache=True, nogil=True)
def span_crcs(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, long_shift: np.ndarray,
              short_shift: np.ndarray, out: np.ndarray) -> None:
    """``out[i]`` = CRC-32C of ``buf[starts[i]:ends[i]]`` for every span."""
    for i in range(starts.shape[0]):
        out[i] = span_crc(buf, starts[i], ends[i], long_shift, short_shift)


@njit(cache=True, nogil=True)
def first_mismatch(buf: np.ndarray, starts: np.ndarray, ends: np.ndarray, expected: np.ndarray,
                   long_shift: np.ndarray, short_shift: np.ndarray) -> int:
    """The index of the first span whose CRC-32C is not ``expected[i]``, or -1."""
    for i in range(starts.shape[0]):
        if span_crc(buf, starts[i], ends[i], long_shift, short_shift) != expected[i]:
            return i
    return -1
