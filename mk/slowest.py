"""The slowest tests of every suite `make test` ran, from the JUnit XML files pytest wrote:
`python mk/slowest.py N FILE...` prints the N slowest, each with its time and suite."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def main() -> None:
    n, files = int(sys.argv[1]), [Path(f) for f in sys.argv[2:]]
    cases = []
    for f in files:
        if not f.exists() or f.stat().st_size == 0:
            continue
        for case in ET.parse(f).getroot().iter("testcase"):
            cases.append((float(case.get("time", 0)), f.stem, f"{case.get('classname')}::{case.get('name')}"))
    print(f"--- the {n} slowest tests (setup, call and teardown), of {len(cases)}")
    for seconds, suite, name in sorted(cases, reverse=True)[:n]:
        print(f"{seconds:8.1f} s  {suite:<11} {name}")


if __name__ == "__main__":
    main()
