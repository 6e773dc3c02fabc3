"""zstd payloads decompressed and compressed in one compiled call for a run of batches, through reused contexts.

A Kafka zstd batch holds one zstd frame. Called from Python, each frame costs, besides the codec's work, a call
into python-zstandard that hands back a new bytes object (allocated, then copied into the buffer the decode or
the encoder writes), plus the checks around it: with batches of 50 KB of records, about 4% of a cleaning task's
CPU (``docs/performance.md``, "Cleaning: CPU per byte"). These kernels call libzstd
(``ZSTD_decompressDCtx``, ``ZSTD_compress2``) straight from compiled code, into the caller's buffer, for every
payload of a run of batches in one call, with one decompression and one compression context per thread made once
(as :mod:`segment_io.compression` does from Python). Python keeps the payloads they do not take (several frames, a
skippable frame, a frame that states more than its room, one that does not decompress) and every error message.

The functions are the libzstd that the ``zstandard`` package ships (its cffi extension exports them), found by name
and given to LLVM's linker before any kernel here is compiled or loaded from the cache (their code calls them by
name, so the cached code holds no address of this process). :data:`LINKED` says whether that worked; where it did
not, nothing here is compiled and the callers make one codec call a payload from Python (python-zstandard's: the
same frames, byte for byte, which the tests check against each other).
"""

from __future__ import annotations

import ctypes
import glob
import os
import threading
from typing import Any

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from segment_io.compression import ZSTD, ZSTD_DEFAULT_LEVEL, ZSTD_MAGIC

#: What the kernels call, by the names of libzstd's own header.
_FUNCTIONS = ("ZSTD_decompressDCtx", "ZSTD_compress2", "ZSTD_isError", "ZSTD_getFrameContentSize",
              "ZSTD_findFrameCompressedSize")
#: What Python calls to make and set up the contexts.
_SETUP = ("ZSTD_createDCtx", "ZSTD_freeDCtx", "ZSTD_createCCtx", "ZSTD_freeCCtx", "ZSTD_CCtx_setParameter")
#: ``ZSTD_c_compressionLevel`` in libzstd's ``ZSTD_cParameter``.
_C_COMPRESSION_LEVEL = 100
#: ``ZSTD_getFrameContentSize``'s answers for a frame that does not state its size, and for bytes that are not one.
_CONTENT_SIZE_UNKNOWN, _CONTENT_SIZE_ERROR = -1, -2


def _library() -> ctypes.CDLL | None:
    """The shared object of the ``zstandard`` package that exports libzstd's functions (its cffi extension)."""
    import zstandard

    for path in sorted(glob.glob(os.path.join(os.path.dirname(zstandard.__file__), "_cffi*.so"))):
        library = ctypes.CDLL(path)
        if all(hasattr(library, name) for name in _FUNCTIONS + _SETUP):
            return library
    return None


def _link() -> ctypes.CDLL | None:
    """Find libzstd's functions and give the kernels' to LLVM's linker; the library, or None when any is missing
    (the callers then take the Python path)."""
    try:
        import llvmlite.binding as llvm

        library = _library()
        if library is None:
            return None
        addresses = {name: ctypes.cast(getattr(library, name), ctypes.c_void_p).value for name in _FUNCTIONS}
        if not all(addresses.values()):
            return None
        for name, address in addresses.items():
            llvm.add_symbol(name, address)
        for name in ("ZSTD_createDCtx", "ZSTD_createCCtx"):
            getattr(library, name).restype = ctypes.c_void_p
            getattr(library, name).argtypes = []
        for name in ("ZSTD_freeDCtx", "ZSTD_freeCCtx"):
            getattr(library, name).restype = ctypes.c_size_t
            getattr(library, name).argtypes = [ctypes.c_void_p]
        library.ZSTD_CCtx_setParameter.restype = ctypes.c_size_t
        library.ZSTD_CCtx_setParameter.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        library.ZSTD_isError.restype = ctypes.c_uint
        library.ZSTD_isError.argtypes = [ctypes.c_size_t]
        return library
    except Exception:  # noqa: BLE001 - not installed, not a shared object, no such symbol: not linked
        return None


_LIBRARY = _link()
LINKED = _LIBRARY is not None


class _Contexts(threading.local):
    """This thread's decompression context and compression context (at zstd's default level, as Kafka's producers
    compress), as addresses for the kernels; freed with the thread's copy of this object."""

    def __init__(self) -> None:
        assert _LIBRARY is not None
        self.dctx: int = _LIBRARY.ZSTD_createDCtx() or 0
        self.cctx: int = _LIBRARY.ZSTD_createCCtx() or 0
        if not self.dctx or not self.cctx or _LIBRARY.ZSTD_isError(
                _LIBRARY.ZSTD_CCtx_setParameter(self.cctx, _C_COMPRESSION_LEVEL, ZSTD_DEFAULT_LEVEL)):
            self._free()
            raise MemoryError("zstd: no context could be made")

    def _free(self) -> None:
        library = _LIBRARY
        if library is not None:
            if self.dctx:
                library.ZSTD_freeDCtx(self.dctx)
            if self.cctx:
                library.ZSTD_freeCCtx(self.cctx)
        self.dctx = self.cctx = 0

    def __del__(self) -> None:
        try:
            self._free()
        except Exception:  # noqa: BLE001 - at the interpreter's exit the library may be gone: nothing to free then
            pass


_CONTEXTS: Any = _Contexts() if LINKED else None


def decompression_context() -> int:
    """This thread's decompression context (an address for :func:`inflate_frames`)."""
    return int(_CONTEXTS.dctx)


def compression_context() -> int:
    """This thread's compression context at zstd's default level (an address for :func:`deflate_frames`)."""
    return int(_CONTEXTS.cctx)


def _pointer(context, builder, kind, array, start):
    """The address of ``array[start]`` as an ``i8*``."""
    data = context.make_array(kind)(context, builder, array).data
    return builder.bitcast(builder.gep(data, [start]), ir.IntType(8).as_pointer())


def _function(builder, name: str, result, arguments):
    return cgutils.get_or_insert_function(builder.module, ir.FunctionType(result, arguments), name)


def _context_call(name: str):
    """An intrinsic ``call(ctx, dst, dst_start, room, src, src_start, n) -> int64`` of libzstd's ``name`` (its C
    signature ``size_t f(ctx*, void* dst, size_t room, const void* src, size_t n)``): ``n`` bytes from
    ``src[src_start:]`` into at most ``room`` bytes at ``dst[dst_start:]`` through the context whose address is
    ``ctx``; what it wrote, or an error code (:func:`_is_error`; negative as a signed number)."""

    @intrinsic
    def call(typingctx, ctx, dst, dst_start, room, src, src_start, n):
        sig = types.int64(ctx, dst, dst_start, room, src, src_start, n)

        def codegen(context, builder, signature, args):
            address, d, d_start, capacity, s, s_start, count = args
            kinds = signature.args
            i64, ptr = ir.IntType(64), ir.IntType(8).as_pointer()
            function = _function(builder, name, i64, [ptr, ptr, i64, ptr, i64])
            return builder.call(function, [
                builder.inttoptr(context.cast(builder, address, kinds[0], types.uint64), ptr),
                _pointer(context, builder, kinds[1], d, context.cast(builder, d_start, kinds[2], types.intp)),
                context.cast(builder, capacity, kinds[3], types.uint64),
                _pointer(context, builder, kinds[4], s, context.cast(builder, s_start, kinds[5], types.intp)),
                context.cast(builder, count, kinds[6], types.uint64)])

        return sig, codegen

    return call


_decompress = _context_call("ZSTD_decompressDCtx")
_compress = _context_call("ZSTD_compress2")


def _frame_query(name: str):
    """An intrinsic ``call(src, src_start, n) -> int64`` of libzstd's ``name(const void* src, size_t n)``."""

    @intrinsic
    def call(typingctx, src, src_start, n):
        sig = types.int64(src, src_start, n)

        def codegen(context, builder, signature, args):
            s, s_start, count = args
            kinds = signature.args
            i64, ptr = ir.IntType(64), ir.IntType(8).as_pointer()
            function = _function(builder, name, i64, [ptr, i64])
            return builder.call(function, [
                _pointer(context, builder, kinds[0], s, context.cast(builder, s_start, kinds[1], types.intp)),
                context.cast(builder, count, kinds[2], types.uint64)])

        return sig, codegen

    return call


_content_size = _frame_query("ZSTD_getFrameContentSize")
_frame_size = _frame_query("ZSTD_findFrameCompressedSize")


@intrinsic
def _is_error(typingctx, code):
    """``ZSTD_isError(code)``, as a bool."""
    sig = types.boolean(code)

    def codegen(context, builder, signature, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)
        function = _function(builder, "ZSTD_isError", i32, [i64])
        result = builder.call(function, [context.cast(builder, args[0], signature.args[0], types.uint64)])
        return builder.icmp_unsigned("!=", result, ir.Constant(i32, 0))

    return sig, codegen


_MAGIC = tuple((ZSTD_MAGIC >> (8 * k)) & 0xFF for k in range(4))


@njit(inline="always")
def _one_frame(data, s, size) -> bool:
    """Whether ``data[s:s + size]`` is one zstd frame and nothing else (a skippable frame is not one)."""
    if size < 4 or data[s] != _MAGIC[0] or data[s + 1] != _MAGIC[1] or data[s + 2] != _MAGIC[2] \
            or data[s + 3] != _MAGIC[3]:
        return False
    whole = _frame_size(data, s, size)
    return not _is_error(whole) and whole == size


@njit(cache=True, nogil=True)
def inflate_frames(data, starts, ends, codecs, capacities, limits, j, buf, at, done, dctx) -> tuple[int, int]:
    """Decompress payloads ``j``, ``j + 1``, ... (``data[starts[i]:ends[i]]``, each one zstd frame) one after another
    into ``buf`` from byte ``at``, payload ``i`` into at most ``capacities[i]`` bytes, ``done[i]`` where it ends,
    through the decompression context ``dctx``. Stops before the first payload whose room does not fit in ``buf``,
    that is not zstd's, not one frame and nothing after it, states more than its room, does not decompress,
    decompresses to nothing (left to the one-shot call, as Python does) or past ``min(limits[i], capacities[i])``.
    Returns ``(i, at)``: the payload it stopped before (the end, if all were done) and where the next one goes."""
    i = j
    while i < starts.shape[0] and codecs[i] == ZSTD:
        s, size, room = starts[i], ends[i] - starts[i], capacities[i]
        if at + room > buf.shape[0] or not _one_frame(data, s, size):
            break
        stated = _content_size(data, s, size)
        if stated == _CONTENT_SIZE_ERROR or (stated != _CONTENT_SIZE_UNKNOWN and stated > room):
            break
        n = _decompress(dctx, buf, at, room, data, s, size)
        if _is_error(n) or n == 0 or n > min(limits[i], room):
            break
        at += n
        done[i] = at
        i += 1
    return i, at


@njit(cache=True, nogil=True)
def deflate_frames(src, starts, sizes, head, bounds, out, ends, cctx) -> int:
    """Each ``src[starts[i]:starts[i] + sizes[i]]`` compressed into one zstd frame through the compression context
    ``cctx``, one after another into ``out``, each after ``head`` bytes left for the caller and given ``bounds[i]``
    bytes of room (zstd's worst case for it, so that the frame is made in one step); ``ends[i + 1]`` where frame
    ``i`` ends (``ends[0]`` is 0). Returns the bytes written, or ``-1 - i`` when payload ``i`` could not be
    compressed (or its room runs past ``out``)."""
    at = 0
    ends[0] = 0
    for i in range(starts.shape[0]):
        at += head
        if at + bounds[i] > out.shape[0]:  # a room past the buffer's end: refused, not written
            return -1 - i
        n = _compress(cctx, out, at, bounds[i], src, starts[i], sizes[i])
        if _is_error(n):
            return -1 - i
        at += n
        ends[i + 1] = at
    return at
