# SPDX-License-Identifier: Apache-2.0
"""The executor's trace: one JSON object per line and event (op_begin, op_end, comm_launch,
comm_wait), in the order the executor issued them (on CUDA, the order kernels were queued)."""
import json
import os
from typing import Mapping, Optional


class Trace:
    """Writes events to `path` (one file per rank: give each rank its own path), line
    buffered, so a killed job leaves every complete line."""

    def __init__(self, path: Optional[str] = None):
        self.path = path
        self.events = [] if path is None else None
        self._file = None
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "w", buffering=1)

    def write(self, event: Mapping) -> None:
        if self._file is not None:
            self._file.write(json.dumps(event, separators=(",", ":")) + "\n")
        else:
            self.events.append(dict(event))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def read(path: str):
    """The events of a trace file, as dicts."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
