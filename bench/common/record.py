"""Fixed-cost completion records shared by every benchmarked system.

Each benchmark task calls :func:`record` first thing. It appends one 16-byte
record (job index, ``time.time_ns()`` at task start) with a single ``os.write``
to an ``O_APPEND`` file owned by the current process, in the directory named
by ``BENCH_RECORD_DIR``. Recording therefore costs every system the same few
microseconds and needs no Redis round trip. The harness reads the files to
learn when jobs ran.
"""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

RECORD = struct.Struct("<qq")
ENV_DIR = "BENCH_RECORD_DIR"

_pid = -1  # process that owns _fd; set after _fd so readers never see -1
_fd = -1
_lock = threading.Lock()


def _reset_lock() -> None:
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_lock)


def _open() -> int:
    """Open this process's record file once (thread- and fork-safe)."""
    global _pid, _fd
    with _lock:
        if _pid != os.getpid():
            directory = os.environ.get(ENV_DIR)
            if not directory:
                return -1
            path = os.path.join(directory, f"{os.getpid()}.rec")
            _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            _pid = os.getpid()
    return _fd


def record(index: int) -> None:
    """Record that job ``index`` starts now (no-op outside the bench)."""
    now = time.time_ns()
    fd = _fd if _pid == os.getpid() else _open()
    if fd >= 0:
        os.write(fd, RECORD.pack(index, now))


def total_records(directory: str | Path) -> int:
    """Number of records written so far (cheap: one stat per file)."""
    size = 0
    with os.scandir(directory) as entries:
        for entry in entries:
            size += entry.stat().st_size
    return size // RECORD.size


def read_records(directory: str | Path) -> list[tuple[int, int]]:
    """All complete records, as (index, start_ns) pairs."""
    out: list[tuple[int, int]] = []
    for path in Path(directory).glob("*.rec"):
        data = path.read_bytes()
        usable = len(data) - len(data) % RECORD.size
        out.extend(RECORD.iter_unpack(data[:usable]))
    return out


class Tail:
    """Reads only the records appended since the previous call."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = directory
        self.offsets: dict[str, int] = {}
        self.count = 0

    def new_records(self) -> list[tuple[int, int]]:
        """Records completed since the last call, as (index, start_ns)."""
        out: list[tuple[int, int]] = []
        with os.scandir(self.directory) as entries:
            for entry in entries:
                start = self.offsets.get(entry.name, 0)
                size = entry.stat().st_size
                usable = (size - start) - (size - start) % RECORD.size
                if usable <= 0:
                    continue
                with open(entry.path, "rb") as f:
                    f.seek(start)
                    data = f.read(usable)
                self.offsets[entry.name] = start + len(data)
                out.extend(RECORD.iter_unpack(data[: len(data) - len(data) % RECORD.size]))
        self.count += len(out)
        return out


def clear(directory: str | Path) -> None:
    """Remove all record files (only while no worker is running)."""
    for path in Path(directory).glob("*.rec"):
        path.unlink()
