"""A broker for a benchmark: ``LocalBroker`` in a temporary directory that is removed
afterwards, plus the bytes its segment files hold."""

import os
import shutil
import tempfile

from mpbroker.testing.local_broker import LocalBroker


class BenchBroker(LocalBroker):
    def __init__(self, base_dir=None, **properties):
        super().__init__(tempfile.mkdtemp(prefix="mpbroker-bench-", dir=base_dir), **properties)

    def disk_bytes(self) -> int:
        total = 0
        for root, _, files in os.walk(self.log_dir):
            total += sum(os.path.getsize(os.path.join(root, name)) for name in files if name.endswith(".kafka"))
        return total

    def __exit__(self, *exc) -> None:
        try:
            super().__exit__(*exc)
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
