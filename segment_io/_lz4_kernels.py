"""LZ4 frames as Kafka's producers write them, decompressed and compressed block by block in one compiled call.

A Kafka LZ4 batch holds one frame of independent blocks of up to 64 KiB, so a batch of 50 KB of records is one
block: called from Python, each block costs a codec call plus the walk around it (slicing, a size field, a
bound check), which together came to a tenth of a cleaning task's CPU on such batches (``docs/performance.md``,
"Cleaning: CPU per byte"). These kernels call LZ4's block functions (``LZ4_decompress_safe``,
``LZ4_compress_default``) straight from compiled code, for every block of a run of batches in one call; Python
keeps the frames they do not take (other framings, checksums, high-compression levels) and every error message.

The functions are the LZ4 library that the ``lz4`` package ships inside its extension modules, found by name and
given to LLVM's linker before any kernel here is compiled or loaded from the cache (their code calls them by
name, so the cached code holds no address of this process). :data:`LINKED` says whether that worked; where it
did not (a build that exports no symbols), nothing here is compiled and the callers make one codec call a block
from Python (cramjam's: the same frames, byte for byte, which the tests check against each other).
"""

from __future__ import annotations

import ctypes

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from segment_io._encode_kernels import _memcpy
from segment_io.compression import LZ4_RAW_BLOCK

#: The block functions the kernels call, by the names LZ4's own header gives them.
_DECOMPRESS, _COMPRESS = "LZ4_decompress_safe", "LZ4_compress_default"
#: The frame header of Kafka's Java producer (see ``segment_io.compression``): magic, FLG, BD, header checksum.
_JAVA_HEADER = np.frombuffer(b"\x04\x22\x4d\x18\x60\x40\x82", np.uint8)
_BLOCK = 64 * 1024


def _link() -> bool:
    """Find LZ4's block functions in the ``lz4`` package's extension and give their addresses to LLVM's linker;
    whether both were found. Any doubt says no: the callers then take the Python path."""
    try:
        import llvmlite.binding as llvm
        import lz4.block._block as extension

        library = ctypes.CDLL(extension.__file__)
        addresses = {name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                     for name in (_DECOMPRESS, _COMPRESS)}
        if not all(addresses.values()):
            return False
        for name, address in addresses.items():
            llvm.add_symbol(name, address)
        return True
    except Exception:  # noqa: BLE001 - not installed, not a shared object, no such symbol: not linked
        return False


LINKED = _link()


def _block_call(name: str):
    """An intrinsic ``call(dst, dst_start, src, src_start, n, room) -> int32`` of the LZ4 function ``name``, whose
    C signature is ``int f(const char* src, char* dst, int srcSize, int dstCapacity)``: ``n`` bytes from
    ``src[src_start:]`` into at most ``room`` bytes at ``dst[dst_start:]``."""

    @intrinsic
    def call(typingctx, dst, dst_start, src, src_start, n, room):
        sig = types.int32(dst, dst_start, src, src_start, n, room)

        def codegen(context, builder, signature, args):
            d, d_start, s, s_start, count, capacity = args
            kinds = signature.args
            i32, bytes_ptr = ir.IntType(32), ir.IntType(8).as_pointer()
            function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(i32, [bytes_ptr] * 2 + [i32] * 2),
                                                      name)
            d_ptr = builder.gep(context.make_array(kinds[0])(context, builder, d).data,
                                [context.cast(builder, d_start, kinds[1], types.intp)])
            s_ptr = builder.gep(context.make_array(kinds[2])(context, builder, s).data,
                                [context.cast(builder, s_start, kinds[3], types.intp)])
            return builder.call(function, [s_ptr, d_ptr, context.cast(builder, count, kinds[4], types.int32),
                                           context.cast(builder, capacity, kinds[5], types.int32)])

        return sig, codegen

    return call


_lz4_decompress = _block_call(_DECOMPRESS)
_lz4_compress = _block_call(_COMPRESS)


@njit(cache=True, nogil=True)
def inflate_frames(data, first, count, block_max, block_start, block_size, capacities, limits, j, buf, at, scratch,
                   ends) -> tuple[int, int]:
    """Decompress payloads ``j``, ``j + 1``, ... (each an LZ4 frame whose blocks :func:`lz4_frame_blocks
    <segment_io._decode_kernels.lz4_frame_blocks>` found: ``count[i]`` of them from ``first[i]`` on) one after
    another into ``buf`` from byte ``at``, payload ``i`` into at most ``capacities[i]`` bytes, ``ends[i]`` where it
    ends. Stops before the first payload whose room does not fit in ``buf``, that has no blocks found, or that
    fails: a block that does not decompress or fills more than its room, or a payload past ``min(limits[i],
    capacities[i])``. Returns ``(i, at)``: the payload it stopped before (its end, if all were done) and where the
    next one goes. ``scratch`` holds a block of the
    largest ``block_max``: a block near the end of its payload's room is inflated there first, so that a block
    which does not fit tells "too big" apart from "corrupt" (both stop here; Python's walk then says which)."""
    i = j
    while i < first.shape[0] and count[i] > 0 and at + capacities[i] <= buf.shape[0]:
        pos, stop, most = at, at + capacities[i], block_max[i]
        ok = True
        for b in range(first[i], first[i] + count[i]):
            size, s = block_size[b], block_start[b]
            if size & LZ4_RAW_BLOCK:
                size &= LZ4_RAW_BLOCK - 1
                if size > stop - pos:
                    ok = False
                    break
                _memcpy(buf, pos, data, s, size)
                pos += size
            elif stop - pos >= most:
                n = _lz4_decompress(buf, pos, data, s, size, most)
                if n < 0:
                    ok = False
                    break
                pos += n
            else:
                n = _lz4_decompress(scratch, 0, data, s, size, most)
                if n < 0 or n > stop - pos:
                    ok = False
                    break
                _memcpy(buf, pos, scratch, 0, n)
                pos += n
        if not ok or pos - at > min(limits[i], capacities[i]):
            return i, at
        at = pos
        ends[i] = at
        i += 1
    return i, at


@njit(inline="always")
def _put_le32(out, p, v) -> None:
    for k in range(4):
        out[p + k] = np.uint8((v >> (8 * k)) & 0xFF)


@njit(cache=True, nogil=True)
def deflate_java_frames(src, starts, sizes, head, header, out, ends) -> int:
    """Each ``src[starts[i]:starts[i] + sizes[i]]`` as an LZ4 frame laid out as Kafka's Java producer writes it
    (``header``, then 64 KiB independent blocks, each stored raw when compressing does not shrink it, no checksums,
    no content size, a zero end mark), one after another into ``out``, each after ``head`` bytes left for the
    caller; ``ends[i + 1]`` where frame ``i`` ends (``ends[0]`` is 0). ``out`` holds each frame's worst case.
    Returns the bytes written."""
    at = 0
    ends[0] = 0
    for i in range(starts.shape[0]):
        at += head
        for k in range(header.shape[0]):
            out[at + k] = header[k]
        at += header.shape[0]
        a, stop = starts[i], starts[i] + sizes[i]
        while a < stop:
            size = min(_BLOCK, stop - a)
            written = _lz4_compress(out, at + 4, src, a, size, size + size // 255 + 16)
            if written <= 0 or written >= size:  # does not shrink it: stored raw, as Lz4BlockOutputStream does
                _memcpy(out, at + 4, src, a, size)
                _put_le32(out, at, size | LZ4_RAW_BLOCK)
                written = size
            else:
                _put_le32(out, at, written)
            at += 4 + written
            a += size
        _put_le32(out, at, 0)  # the end mark
        at += 4
        ends[i + 1] = at
    return at
