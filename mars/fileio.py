"""The one way files are written: whole or not at all (a temporary file in the same folder, fsync, rename)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | Path, data: bytes) -> None:
    write_chunks_atomic(path, [data])


def write_lines_atomic(path: str | Path, lines: Iterable[str]) -> None:
    """Streams ``lines`` (each with its newline) to the file: the whole text is never held in memory."""
    write_chunks_atomic(path, (line.encode("utf-8") for line in lines))


def write_chunks_atomic(path: str | Path, chunks: Iterable[bytes]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would make every result owner-only
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_stats(folder: str | Path, pattern: str = "*") -> list[tuple[str, int, int]]:
    """(name, size, modification time in ns) of the files in ``folder`` matching ``pattern``, sorted: what a resumed
    job compares to know that its inputs are the ones its kept work was computed from."""
    return sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in Path(folder).glob(pattern) if f.is_file())


def write_json_atomic(path: str | Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def check_writable(path: str | Path, flag: str = "--output") -> None:
    """Refuse an output path that cannot be written, before any work starts: its nearest existing ancestor must be a
    folder that takes a new file (a probe file is created and removed there; nothing else is created). Raises
    ConfigError naming the flag and the folder."""
    from mars.pipeline.config import ConfigError

    path = Path(path).expanduser().absolute()
    folder = path
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder == path and not path.is_dir():
        folder = path.parent  # an existing file is replaced: its folder must take the new one
    if not folder.is_dir():
        raise ConfigError(f"{flag} {path}: {folder} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=".mars-write-check.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write in {folder} ({exc.strerror})") from None
