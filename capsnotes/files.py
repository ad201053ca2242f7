"""Writing files so that a reader never sees half of one, and hashing them.

Every file capsnotes writes (checkpoints, histories, records, shipped weights, unpacked
datasets) goes through :func:`atomic_write_bytes`: the file at ``path`` is either the old
one or the whole new one, never a partial write.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["atomic_write_bytes", "file_sha256", "write_json"]


def _read_umask() -> int:
    """The process's umask. Python can only read it by setting it, so this is done once,
    when the module is imported, not around every write: a thread creating a file while
    it is briefly 0 would get the wrong permissions."""
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


#: The permissions ``open()`` gives a new file: 0o666 less the umask (read at import).
FILE_MODE = 0o666 & ~_read_umask()


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder and a
    rename; on any error the temporary file is removed and ``path`` is untouched. The
    file gets the permissions a plain ``open()`` would give it (a web server or a wheel
    can read it), not the owner-only ones of a temporary file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise


def write_json(path: str | os.PathLike[str], value: Any) -> None:
    """``value`` as indented JSON, written atomically."""
    atomic_write_bytes(path, (json.dumps(value, indent=1) + "\n").encode())


def file_sha256(path: str | os.PathLike[str]) -> str:
    """SHA-256 of a file's bytes, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
