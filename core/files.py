"""Writing a file so that its readers see the old one or the new one, never half of it: the run
directory's files, the dataset cache, saved generators."""
from __future__ import annotations

import os
import shutil
import threading
from typing import BinaryIO, Callable


def write_atomic(path: str, data: bytes | BinaryIO | Callable[[BinaryIO], object]) -> None:
    """Write bytes, copy an open file, or let a function write (e.g. torch.save of a dataset too big
    to hold twice in memory) into a temp file in the same folder, then rename: readers see old or
    new, never half. A failed write removes its temp file: on a full disk, a leftover would keep it full."""
    # The thread too: the trainer's heartbeat thread writes the status while its main thread may.
    tmp = f"{path}.tmp{os.getpid()}-{threading.get_ident()}"
    try:
        with open(tmp, "wb") as f:
            if isinstance(data, bytes):
                f.write(data)
            elif callable(data):
                data(f)
            else:
                shutil.copyfileobj(data, f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
