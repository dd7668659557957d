"""Files written whole or not at all.

Every file propopt and its case studies write goes through :func:`atomic_write`:
the data go to a hidden temporary file in the same folder, are flushed and
``fsync``-ed to the disk, and only then take the final name with
``os.replace`` (one step on POSIX and Windows), after which the folder is
``fsync``-ed too where the system allows it.  A reader therefore finds under
the final name the previous file or the new one, whole; never part of the
new one, whether the writer is killed, the disk fills up or the power goes.

* :func:`atomic_write`: a context manager that yields the open temporary file;
* :func:`write_bytes` and :func:`write_text`: a whole file in one call.

A failed write raises one line (``OSError``, its errno kept) that names the
file and the cause, and removes the temporary file; the file the final name
held before, if any, is unchanged.  A writer killed outright (``SIGKILL``)
leaves its temporary file, ``.<name>.<pid>.<random>.tmp``, which nothing
reads and which is safe to delete.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["atomic_write", "write_bytes", "write_text"]


def _fsync_folder(folder: str) -> None:
    """Make a rename in ``folder`` durable (POSIX; a no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems refuse to fsync a folder: the rename is done anyway
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str], mode: str = "wb", **open_kwargs: Any
) -> Iterator[IO[Any]]:
    """Open a temporary file next to ``path``; on a clean exit it becomes ``path``.

    ``mode`` is ``'wb'`` (the default) or ``'w'``; ``open_kwargs`` go to
    :func:`open` (``encoding``, ``newline``).  If the block raises, or the
    flush, ``fsync`` or rename fails, the temporary file is removed and
    ``path`` keeps whatever it held before.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "out.txt")
    >>> with atomic_write(path, "w") as f:
    ...     _ = f.write("whole or not at all")
    >>> open(path).read()
    'whole or not at all'
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"mode={mode!r}: atomic_write writes a new file, 'w' or 'wb'")
    final = os.path.abspath(os.fspath(path))
    folder, name = os.path.split(final)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        # 0o666 less the umask, as open() would give the final file
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    except OSError as e:
        raise _failed(e, path) from e
    try:
        with os.fdopen(fd, mode, **open_kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except OSError as e:
        _remove(tmp)
        raise _failed(e, path) from e
    except BaseException:
        _remove(tmp)
        raise
    _fsync_folder(folder)


def _remove(tmp: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(tmp)


def _failed(e: OSError, path: str | os.PathLike[str]) -> OSError:
    """One line naming the file and the cause; ``OSError(errno, ...)`` keeps the subclass."""
    cause = e.strerror or str(e) or type(e).__name__
    msg = f"{cause}: could not write {os.fspath(path)!r} (a file already there is unchanged)"
    return OSError(msg) if e.errno is None else OSError(e.errno, msg)


def write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` with :func:`atomic_write`."""
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` with :func:`atomic_write`."""
    with atomic_write(path, "w", encoding=encoding) as f:
        f.write(text)
