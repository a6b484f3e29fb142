"""Claiming a trace file: never truncate a file another live recorder
writes (flock), and the name a second writer gets instead."""

import fcntl
import os
import stat
import sys

__all__ = ["Busy", "alt_path", "claim"]


def _warn(msg):
    try:
        sys.stderr.write("commdebug: %s\n" % msg)
        sys.stderr.flush()
    except Exception:
        pass


class Busy(Exception):
    """Another live process (or another recorder of this one) holds the file."""


def alt_path(path, n=1):
    """rank0.zst -> rank0.<pid>.zst (n == 1) or rank0.<pid>-<n>.zst."""
    d, base = os.path.split(path)
    stem, dot, ext = base.partition(".")
    tag = str(os.getpid()) if n == 1 else "%d-%d" % (os.getpid(), n)
    return os.path.join(d, stem + "." + tag + (dot + ext if dot else ""))


def claim(path):
    """Open path for writing without truncating it, take an exclusive flock
    (regular files), then truncate.  Returns (fd, regular).  Raises Busy
    when another open file holds the lock; OSError otherwise.  A FIFO with
    no reader raises OSError(ENXIO) instead of blocking."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK
    fd = os.open(path, flags, 0o644)
    try:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
        if regular:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Busy(path)
            os.ftruncate(fd, 0)
        fl = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, fl & ~os.O_NONBLOCK)
        return fd, regular
    except BaseException:
        os.close(fd)
        raise


def _claim_free_name(path):
    """claim(path), or the first free alt_path(path, n).  Returns
    (fd, regular, path actually used)."""
    try:
        fd, reg = claim(path)
        return fd, reg, path
    except Busy:
        pass
    for n in range(1, 100):
        p = alt_path(path, n)
        try:
            fd, reg = claim(p)
        except Busy:
            continue
        _warn("%s is being written by another live recorder; this one (pid %d) writes %s"
              % (path, os.getpid(), p))
        return fd, reg, p
    raise Busy(path)
