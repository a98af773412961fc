"""Import the modules named on the command line (a package name followed by ``/`` walks all of it),
so that Python writes their bytecode once, in one process, before the test suites' many processes
start at once and each compile the same modules. Run with PYTHONDONTWRITEBYTECODE unset."""

from __future__ import annotations

import importlib
import pkgutil
import sys


def main(names: list[str]) -> int:
    for name in names:
        module = importlib.import_module(name.rstrip("/"))
        if name.endswith("/"):
            for info in pkgutil.walk_packages(module.__path__, module.__name__ + "."):
                importlib.import_module(info.name)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
