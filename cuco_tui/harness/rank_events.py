"""How a rank reports: one JSON object a line in `rank{R}.jsonl` of the run folder, and its exit code.

The launcher and the cascade read nothing else, so every event name and field written through
EventLog is a contract with them."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 2  # the candidate failed (init error, CUDA error, wrong answer): reported
EXIT_TIMEOUT = 124
EXIT_ABORTED = 125


class EventLog:
    def __init__(self, path: Path, rank: int) -> None:
        self.file = open(path, "a", buffering=1)
        self.rank = rank
        self.lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "rank": self.rank, "t": time.time(), **fields}
        with self.lock:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())
