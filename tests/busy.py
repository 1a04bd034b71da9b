"""A busy machine for tests that results do not depend on load: CPU-burning processes.

``with busy_machine(4): ...`` keeps four processes spinning on the CPU for the duration
and kills exactly those processes afterwards (by their own handles, never by name).

As a script, ``python tests/busy.py 6 COMMAND...`` runs COMMAND beside six burners and
exits with its status (CI runs the tests marked ``limits`` so: see ``.ci/run``).
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


def main(argv: list[str]) -> int:
    count, command = int(argv[0]), argv[1:]
    with busy_machine(count):
        return subprocess.run(command).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
