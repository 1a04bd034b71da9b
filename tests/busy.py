"""A busy machine for tests that results do not depend on load: CPU-burning processes.

``with busy_machine(4): ...`` keeps four processes spinning on the CPU for the duration
and kills exactly those processes afterwards (by their own handles, never by name).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

BURN = "while True:\n    pass\n"


@contextmanager
def busy_machine(processes: int = 4) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Run ``processes`` CPU-burning Python processes while the block runs."""
    burners = [subprocess.Popen([sys.executable, "-c", BURN]) for _ in range(processes)]
    try:
        yield burners
    finally:
        for burner in burners:
            burner.kill()
        for burner in burners:
            burner.wait()
