"""Opening a strace log: stdin, a plain file, or gzip read up to where it is cut (a log still
being written, damaged bytes); and the task an ``-ff`` log's name carries.
"""

from __future__ import annotations

import gzip
import io
import sys
import zlib
from pathlib import Path
from typing import IO, Any

from labhive.scheduler.core.errors import UserError


class _GzipUpToCut(io.RawIOBase):
    """A gzip stream read up to where it stops making sense: the end of a log still being
    written (the last block is not there yet) or damaged bytes. What came before is kept;
    ``cut`` then says why the stream stopped early."""

    def __init__(self, fh: IO[bytes]) -> None:
        super().__init__()
        self._fh = fh
        self._gz = gzip.GzipFile(fileobj=fh)
        self.cut: str | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.cut:
            return 0
        try:
            data = self._gz.read1(len(buffer))  # one block: nothing decoded is ever dropped
        except EOFError:
            self.cut = "the file ends mid-stream"
            return 0
        except (gzip.BadGzipFile, zlib.error):
            self.cut = "the compressed data is damaged there"
            return 0
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._gz.close()
            self._fh.close()
        finally:
            super().close()


def open_log(path: str | Path) -> IO[str]:
    """Open a strace log for reading text: ``-`` is stdin, ``.gz`` is decompressed (by its
    magic bytes, whatever the name) up to where it is cut (see :func:`cut_note`). Undecodable
    bytes are kept as surrogate escapes."""
    if str(path) == "-":
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="surrogateescape")
    p = Path(path)
    try:
        fh = p.open("rb")
    except FileNotFoundError:
        raise UserError(f"no strace log at {p}: check the path") from None
    except IsADirectoryError:
        raise UserError(f"{p} is a directory: give one strace log file") from None
    except OSError as err:
        raise UserError(f"cannot read strace log {p}: {err.strerror}") from None
    except ValueError:  # a NUL in the name
        raise UserError(f"no strace log at {str(p)!r}: a file name has no NUL character") from None
    magic = fh.peek(2)[:2] if hasattr(fh, "peek") else b""
    if magic == b"\x1f\x8b":
        stream = io.BufferedReader(_GzipUpToCut(fh))
        return io.TextIOWrapper(stream, encoding="utf-8", errors="surrogateescape")
    return io.TextIOWrapper(fh, encoding="utf-8", errors="surrogateescape")


def cut_note(fh: IO[str], lines: int) -> str | None:
    """For a log opened by :func:`open_log` and read to its end: why a compressed log stopped
    before its end, and the last line that was parsed; None when it was whole."""
    raw = getattr(getattr(fh, "buffer", None), "raw", None)
    cut = raw.cut if isinstance(raw, _GzipUpToCut) else None
    return f"{cut}: parsed up to line {lines}" if cut else None


def ff_pid(path: str | Path) -> int | None:
    """The pid an ``-ff`` log carries in its name (``trace.604`` -> 604), else None."""
    suffix = Path(path).suffix
    return int(suffix[1:]) if suffix[1:].isdecimal() else None
