"""zstd through the system libzstd (libzstd.so.1), loaded with ctypes.

No Python package is needed: the recorder only depends on torch.  When the
library cannot be loaded, ``load()`` returns None and callers fall back to
plain JSON Lines.

Compression makes one complete frame per call, so a file made of several
calls is a valid multi-frame zstd stream and a reader can decode every frame
that was written before a process died.  Every frame carries zstd's content
checksum (ZSTD_c_checksumFlag: the low 32 bits of the XXH64 of the frame's
content), which libzstd verifies when it decodes the frame.  ctypes releases
the GIL during the foreign call, so compressing on the writer's background
thread does not stall the training loop.
"""

import ctypes
import struct
import ctypes.util
import os

__all__ = ["load", "Zstd"]

_C_COMPRESSION_LEVEL = 100
_C_CHECKSUM_FLAG = 201

_NAMES = ("libzstd.so.1", "libzstd.so", "libzstd.1.dylib", "libzstd.dylib")


# The recorder's compression level (COMMDEBUG_ZSTD_LEVEL's default): on its
# traces, in the writer's chunks, level 1 is both faster and smaller than
# zstd's own default 3 (tests/bench/zstd_level.py).
DEFAULT_LEVEL = 1


class _InBuffer(ctypes.Structure):
    _fields_ = [("src", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


class _OutBuffer(ctypes.Structure):
    _fields_ = [("dst", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


class ZstdError(Exception):
    pass


class TruncatedError(ZstdError):
    """The input ended inside a frame; ``data`` holds what was decoded before."""

    def __init__(self, msg, data):
        super().__init__(msg)
        self.data = data


class Zstd:
    """The few libzstd entry points the recorder and the trace reader use."""

    def __init__(self, lib):
        self._lib = lib
        lib.ZSTD_compressBound.argtypes = [ctypes.c_size_t]
        lib.ZSTD_compressBound.restype = ctypes.c_size_t
        lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
        lib.ZSTD_isError.restype = ctypes.c_uint
        lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
        lib.ZSTD_getErrorName.restype = ctypes.c_char_p
        lib.ZSTD_versionString.argtypes = []
        lib.ZSTD_versionString.restype = ctypes.c_char_p
        lib.ZSTD_createDStream.argtypes = []
        lib.ZSTD_createDStream.restype = ctypes.c_void_p
        lib.ZSTD_freeDStream.argtypes = [ctypes.c_void_p]
        lib.ZSTD_freeDStream.restype = ctypes.c_size_t
        lib.ZSTD_initDStream.argtypes = [ctypes.c_void_p]
        lib.ZSTD_initDStream.restype = ctypes.c_size_t
        lib.ZSTD_DStreamOutSize.argtypes = []
        lib.ZSTD_DStreamOutSize.restype = ctypes.c_size_t
        lib.ZSTD_decompressStream.argtypes = [ctypes.c_void_p, ctypes.POINTER(_OutBuffer),
                                              ctypes.POINTER(_InBuffer)]
        lib.ZSTD_decompressStream.restype = ctypes.c_size_t
        lib.ZSTD_createCCtx.argtypes = []
        lib.ZSTD_createCCtx.restype = ctypes.c_void_p
        lib.ZSTD_freeCCtx.argtypes = [ctypes.c_void_p]
        lib.ZSTD_freeCCtx.restype = ctypes.c_size_t
        lib.ZSTD_CCtx_setParameter.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        lib.ZSTD_CCtx_setParameter.restype = ctypes.c_size_t
        lib.ZSTD_compress2.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_char_p, ctypes.c_size_t]
        lib.ZSTD_compress2.restype = ctypes.c_size_t
        self.version = lib.ZSTD_versionString().decode()

    def _check(self, rc, what):
        if self._lib.ZSTD_isError(rc):
            raise ZstdError("%s: %s" % (what, self._lib.ZSTD_getErrorName(rc).decode()))
        return rc

    def compressor(self, level=DEFAULT_LEVEL):
        """A Compressor: frames with content checksums, one reused context."""
        return Compressor(self, level)

    def decompress_iter(self, f, chunk=1 << 20):
        """Decode the zstd stream read from the binary file f, yielding the
        decoded bytes piece by piece (memory stays bounded).  Raises
        TruncatedError (data b"") when the input ends inside a frame,
        ZstdError when it is corrupt (a checksum mismatch included)."""
        lib = self._lib
        ds = lib.ZSTD_createDStream()
        if not ds:
            raise ZstdError("ZSTD_createDStream failed")
        try:
            self._check(lib.ZSTD_initDStream(ds), "ZSTD_initDStream")
            outsz = lib.ZSTD_DStreamOutSize()
            outbuf = ctypes.create_string_buffer(outsz)
            complete = True
            while True:
                data = f.read(chunk)
                if not data:
                    break
                src = ctypes.create_string_buffer(data, len(data))
                inb = _InBuffer(ctypes.cast(src, ctypes.c_void_p), len(data), 0)
                while True:
                    pos_before = inb.pos
                    outb = _OutBuffer(ctypes.cast(outbuf, ctypes.c_void_p), outsz, 0)
                    rc = self._check(lib.ZSTD_decompressStream(ds, ctypes.byref(outb),
                                                               ctypes.byref(inb)),
                                     "ZSTD_decompressStream")
                    if outb.pos:
                        yield outbuf.raw[:outb.pos]
                    if rc == 0:
                        complete = True
                    elif outb.pos or inb.pos != pos_before:
                        complete = False
                    if inb.pos == inb.size and outb.pos < outsz:
                        break
            if not complete:
                raise TruncatedError("input ends inside a zstd frame", b"")
        finally:
            lib.ZSTD_freeDStream(ds)


class Compressor:
    """Makes complete frames with ZSTD_c_checksumFlag set, reusing one
    compression context (ZSTD_compress would build one per call).  Not
    thread-safe: the trace writer calls it under its I/O lock."""

    def __init__(self, z, level):
        lib = z._lib
        self._z = z
        self._lib = lib
        self._cctx = lib.ZSTD_createCCtx()
        if not self._cctx:
            raise ZstdError("ZSTD_createCCtx failed")
        self._free = lib.ZSTD_freeCCtx
        z._check(lib.ZSTD_CCtx_setParameter(self._cctx, _C_COMPRESSION_LEVEL, level),
                 "ZSTD_CCtx_setParameter(level)")
        z._check(lib.ZSTD_CCtx_setParameter(self._cctx, _C_CHECKSUM_FLAG, 1),
                 "ZSTD_CCtx_setParameter(checksumFlag)")
        self._cap = 0
        self._dst = None

    def frame(self, data):
        """One complete frame (bytes) holding data, with its checksum."""
        cap = self._lib.ZSTD_compressBound(len(data))
        if cap > self._cap:
            self._cap = max(cap, 1 << 16)
            self._dst = ctypes.create_string_buffer(self._cap)
        n = self._z._check(self._lib.ZSTD_compress2(self._cctx, self._dst, self._cap, data,
                                                    len(data)), "ZSTD_compress2")
        return ctypes.string_at(self._dst, n)

    def entry_points(self):
        """(its context, ZSTD_compress2, ZSTD_compressBound, ZSTD_isError) as
        addresses, for C code that compresses with them (AsyncWrite): the
        context is this object's, freed with it."""
        lib = self._lib
        addr = lambda f: ctypes.cast(f, ctypes.c_void_p).value  # noqa: E731
        return (self._cctx, addr(lib.ZSTD_compress2), addr(lib.ZSTD_compressBound),
                addr(lib.ZSTD_isError))

    def __del__(self):
        try:
            if self._cctx:
                self._free(self._cctx)
                self._cctx = None
        except Exception:
            pass


# Frames the training thread writes itself (before a collective) are made in
# Python with raw (uncompressed) blocks: compressing a few kilobytes there,
# with libzstd's code and tables cold after a training step, costs about
# 100 us; a raw frame costs a copy.  The writer thread later replaces them
# with a compressed frame (TraceWriter._compact).
_RAW_BLOCK = 128 * 1024
_SKIPPABLE_MAGIC = b"\x50\x2a\x4d\x18"
_xxh = []


def _xxh64():
    """XXH64 from libxxhash (the content checksum of a zstd frame), or None."""
    if not _xxh:
        f = None
        for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
            if not name:
                continue
            try:
                f = ctypes.CDLL(name).XXH64
                f.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_ulonglong]
                f.restype = ctypes.c_ulonglong
                break
            except (OSError, AttributeError):
                f = None
        _xxh.append(f)
    return _xxh[0]


def raw_frame(data):
    """A zstd frame holding data in raw blocks (single segment, content
    size in 4 bytes), with its content checksum where libxxhash is there."""
    xxh = _xxh64()
    n = len(data)
    out = [b"\x28\xb5\x2f\xfd", bytes([0xA4 if xxh else 0xA0]), struct.pack("<I", n)]
    pos = 0
    while True:
        size = min(_RAW_BLOCK, n - pos)
        last = pos + size >= n
        out.append(struct.pack("<I", (size << 3) | int(last))[:3])
        out.append(data[pos:pos + size])
        pos += size
        if last:
            break
    if xxh:
        out.append(struct.pack("<I", xxh(data, n, 0) & 0xFFFFFFFF))
    return b"".join(out)


def raw_content(frame):
    """The content of a frame raw_frame made."""
    return b"".join(raw_blocks(frame))


def raw_blocks(frame):
    """The blocks' bytes of a frame raw_frame made (views of it), in order."""
    if frame[:4] != b"\x28\xb5\x2f\xfd" or frame[4] not in (0xA0, 0xA4):
        raise ValueError("commdebug: not a frame of raw blocks")
    n = struct.unpack_from("<I", frame, 5)[0]
    pos, parts, got = 9, [], 0
    view = memoryview(frame)
    while True:
        hdr = frame[pos] | frame[pos + 1] << 8 | frame[pos + 2] << 16
        size = hdr >> 3
        if (hdr >> 1) & 3 or pos + 3 + size > len(frame):
            raise ValueError("commdebug: not a frame of raw blocks")
        parts.append(view[pos + 3:pos + 3 + size])
        pos += 3 + size
        got += size
        if hdr & 1:
            break
    if got != n:
        raise ValueError("commdebug: a raw frame whose size is not its blocks'")
    return parts


def skippable_header(payload):
    """The 8 bytes that make the next payload bytes a skippable frame."""
    return _SKIPPABLE_MAGIC + struct.pack("<I", payload)


_cached = []


def load():
    """The loaded library wrapper, or None when libzstd is not available.

    COMMDEBUG_NO_ZSTD=1 in the environment pretends it is missing (tests use
    it to exercise the plain JSON Lines fallback)."""
    if _cached:
        return _cached[0]
    z = None
    if os.environ.get("COMMDEBUG_NO_ZSTD", "") not in ("", "0"):
        _cached.append(None)
        return None
    names = list(_NAMES)
    found = ctypes.util.find_library("zstd")
    if found:
        names.append(found)
    for name in names:
        try:
            z = Zstd(ctypes.CDLL(name))
            break
        except (OSError, AttributeError):
            z = None
    _cached.append(z)
    return z
