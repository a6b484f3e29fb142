"""The lines buffered for the trace, taken out and made bytes:
``LineText``, a base of _writer.TraceWriter.

Where the recorder's C module is built, ``buf`` is its LineBuf, which
formats each item as it is appended; without it, a list whose items are
formatted here when a frame takes them (``_text``)."""

__all__ = ["LineText"]


class LineText:
    def _text(self, chunk):
        """The bytes of the lines in chunk.  An item is a line, or (so that
        the recording thread does no formatting) a tuple (prefix, t) for the
        line prefix + str(t - mono0) + "}\n", or (prefix1, prefix2, t) for
        two such lines with the same time, or an int: a mark (the number of
        the region whose region_enter line comes next), noted in
        self._marks as (region, index of that line).  (The C module's text()
        where it is built; this Python where it refuses an item.)"""
        if self._ctext is not None:
            try:
                data, self._marks = self._ctext(chunk, self._mono0)
                return data
            except (TypeError, OverflowError):
                pass
        m0 = self._mono0
        out = []
        add = out.append
        marks = self._marks = []
        pairs = 0         # items of two lines so far (for the marks' line numbers)
        for x in chunk:
            c = x.__class__
            if c is tuple:
                if len(x) == 2:
                    add(x[0] + str(x[1] - m0) + "}\n")
                else:
                    t = str(x[2] - m0) + "}\n"
                    add(x[0] + t + x[1] + t)
                    pairs += 1
            elif c is str:
                add(x)
            else:
                marks.append((x, len(out) + pairs))
        return "".join(out).encode("utf-8", "surrogatepass")

    def _take_lines(self):
        """(n, what the n items buffered are, taken out of buf: their bytes
        from a LineBuf, the items themselves from a list), or (0, None); the
        caller holds _take."""
        n = len(self.buf)
        if n == 0:
            return 0, None
        if self._formatted:
            data, self._marks, n = self.buf.take()
            return n, data
        chunk = self.buf[:n]
        del self.buf[:n]
        return n, chunk
