"""Moving a trace once the rank is known: ``Relocation``, a base of
_writer.TraceWriter (its state: the fd, the path, the meta frame's length,
the raw tail and frame index, all under its I/O lock)."""

import fcntl
import os

from ._claim import Busy, _warn, alt_path

__all__ = ["Relocation"]


class Relocation:
    def relocate(self, newpath, first_line):
        """Move the trace to newpath (claimed as in claim(); a busy name gets
        an alt_path) with first_line as its new first frame, keeping every
        frame written after the old first one.  Returns the path used, or
        None when the trace stays where it is (not a regular file, a stuck
        write, an error)."""
        if not self.regular or self._fd < 0 or self._dead:
            return None
        if not self._io.acquire(timeout=1.0):
            return None
        try:
            # (raw: the frame joins the raw tail, which must reach the
            # file's end for _compact)
            self._drain_locked(raw=True)
            self._settle()
            if self._dead:
                return None
            old, oldfd = self.path, self._fd
            with open(old, "rb") as f:
                f.seek(self._meta_len)
                rest = f.read(self._end - self._meta_len)    # (not the padding after)
            head = self._encode(first_line.encode("utf-8", "surrogatepass"))
            d, base = os.path.split(newpath)
            if d:
                os.makedirs(d, exist_ok=True)
            tmp = os.path.join(d, ".%s.tmp%d" % (base, os.getpid()))
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0),
                         0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                for part in (head, rest):
                    view = memoryview(part)
                    while view:
                        view = view[os.write(fd, view):]
                target = newpath
                n = 0
                while True:
                    holder = self._hold(target) if target != old else None
                    if holder != "busy":
                        break
                    n += 1
                    if n >= 100:
                        raise Busy(newpath)
                    target = alt_path(newpath, n)
                if target != newpath:
                    _warn("%s is being written by another live recorder; this one (pid %d) "
                          "writes %s" % (newpath, os.getpid(), target))
                os.rename(tmp, target)
                if holder is not None:
                    os.close(holder)
            except BaseException:
                os.close(fd)
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise
            if target != old:
                try:
                    os.unlink(old)
                except OSError:
                    pass
            os.close(oldfd)
            self._fd = fd
            self.path = target
            self.bytes_out += len(head) - self._meta_len
            if self._tail_at is not None:
                self._tail_at += len(head) - self._meta_len
            if self.index is not None:
                for f in self.index:
                    f[0] += len(head) - self._meta_len
            self._end = len(head) + len(rest)
            self._meta_len = len(head)
            self._pad_drop(cut=False)       # (the mapping was the old file's)
            return target
        except OSError as e:
            _warn("could not move %s to %s (%s); the trace stays where it is"
                  % (self.path, newpath, e.strerror or e))
            return None
        finally:
            self._io.release()

    @staticmethod
    def _hold(path):
        """Lock path if it exists and no one holds it: the fd (keep it until
        the rename is done), None when it does not exist, "busy" when a live
        writer holds it."""
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return "busy"
        return fd
