"""How a run's configuration (:class:`repro_check.trace.protocol.RunConfig`) reaches its
process: in a file, named by ``REPRO_CHECK_RUN``.

The configuration holds the target's arguments, which may be as long as a command line allows
(about 2 MB in all, 128 KiB each on Linux), while one environment variable may hold no more than
128 KiB: so the variable only says where the JSON is. ``fd:N`` is an unlinked temporary file
handed over as descriptor N (read once, then closed); ``file:PATH`` a file that several
processes read (the ranks of a torchrun job). Standard library only: the rank supervisor starts
without torch.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import MutableMapping

from repro_check.trace.protocol import RunConfig

#: the variable that says where the run's configuration is
RUN_VAR = "REPRO_CHECK_RUN"


def config_file(config: RunConfig, folder: str | None = None) -> int:
    """The configuration in an unlinked temporary file (in ``folder``, else the temporary
    folder): a descriptor to hand over, inheritable, positioned at its start."""
    fh = tempfile.TemporaryFile(dir=folder)
    try:
        fh.write(config.to_json().encode("utf-8"))
        fh.flush()
        fd = os.dup(fh.fileno())
    finally:
        fh.close()
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    return fd


def by_descriptor(fd: int) -> str:
    return f"fd:{fd}"


def by_path(path: str) -> str:
    return f"file:{path}"


def read_config(environ: MutableMapping[str, str], keep: bool = False) -> RunConfig:
    """The configuration ``environ[RUN_VAR]`` points to; the variable is removed (the target's
    own processes must not take it for theirs) unless ``keep``. A configuration of another
    version of the format, or a broken one, is a
    :class:`~repro_check.trace.protocol.ProtocolError`."""
    where = environ[RUN_VAR] if keep else environ.pop(RUN_VAR)
    if where.startswith("fd:"):
        fd = int(where[3:])
        try:
            chunks, offset = [], 0
            while True:
                chunk = os.pread(fd, 1 << 20, offset)
                if not chunk:
                    break
                chunks.append(chunk)
                offset += len(chunk)
        finally:
            os.close(fd)
        data = b"".join(chunks)
    elif where.startswith("file:"):
        with open(where[5:], "rb") as fh:
            data = fh.read()
    else:
        raise ValueError(f"{RUN_VAR} must be fd:N or file:PATH, got {where[:80]!r}")
    return RunConfig.from_json(data)
