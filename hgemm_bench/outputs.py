"""The files a bench run writes: every one checked before the first measurement (its folder created, the
file writable), and each written whole (a temp file beside it, then os.replace), so that a run stopped
at any point leaves either the previous version or the new one, never half a file."""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import Any


class OutputError(ValueError):
    """An output path the run could not write: the message names the flag, the path and why."""


def planned_outputs(s: Any) -> list[tuple[str, str, bool]]:
    """(flag, path, is a folder) of every file or folder a run with Settings `s` will write."""
    if s.readme:  # (rewrites a README in place: its own mode reports what it cannot write)
        return []
    if s.plots:
        return [("--out", s.out, True)]
    if s.ladder_doc:
        return [("--ladder-doc-out", s.ladder_doc_out, False)]
    if s.profile:
        return [("--profile", s.profile, False)]
    if s.list_only:
        return []
    wanted = [("--json", s.json)] if s.matmul else [("--json", s.json), ("--csv", s.csv), ("--plot", s.plot)]
    return [(flag, path, False) for flag, path in wanted if path]


def read_only(path: Path) -> bool:
    """An existing file nobody may write by its mode bits (also as root, whom os.access lets write it)."""
    return not os.access(path, os.W_OK) or not stat.S_IMODE(path.stat().st_mode) & 0o222


def prepare(flag: str, path: str, is_dir: bool = False) -> None:
    """Create the folder `path` names (or holds) and check that a file can be written in it; raises
    OutputError naming the flag and the reason."""
    p = Path(path)
    folder = p if is_dir else p.parent
    if not is_dir and p.is_dir():
        raise OutputError(f"{flag} {path}: is a folder, not a file")
    if not is_dir and p.exists() and read_only(p):
        raise OutputError(f"{flag} {path}: the file exists and is read-only; make it writable or choose another")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".hgemm-write-check-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write in the folder {folder} ({exc.strerror or exc})") from None


def prepare_all(s: Any) -> None:
    """prepare() every output of planned_outputs(s)."""
    for flag, path, is_dir in planned_outputs(s):
        prepare(flag, path, is_dir)


def new_file_mode(path: Path) -> int:
    """The mode a replaced file keeps, or a new one gets from the umask (mkstemp's files are 0600)."""
    if path.exists():
        return stat.S_IMODE(path.stat().st_mode)
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def write_atomically(path: str | Path, text: str, newline: str | None = None) -> None:
    """`text` into `path` whole: a temp file in the same folder, then os.replace."""
    p = Path(path)
    mode = new_file_mode(p)
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline=newline) as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
