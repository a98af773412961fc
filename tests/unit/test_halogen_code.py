import gzip
import sys

import pytest

from halluscope.errors import DataError
from halluscope.halogen.code import extract_imports
from halluscope.knowledge.pypi import PackageIndex, normalize


@pytest.mark.parametrize("text,expected", [
    ("import os", ["os"]),
    ("import a, b", ["a", "b"]),
    ("import a.b as c", ["a"]),
    ("import numpy as np, pandas as pd", ["numpy", "pandas"]),
    ("from a.b import c", ["a"]),
    ("from a.b.c import (d, e)", ["a"]),
    ("```python\nimport requests\nfrom bs4 import BeautifulSoup\n```", ["requests", "bs4"]),
    ("import sys\nimport json\nimport re", ["sys", "json", "re"]),  # consecutive lines all count
    ("You can use `import numpy as np` for this.", ["numpy"]),
    ("First `from flask import Flask`, then run it.", ["flask"]),
    ("    import torch  # indented inside a function", ["torch"]),
    (">>> import math", ["math"]),
    ("import os; import sys", ["os", "sys"]),
    ("from . import sibling\nfrom .pkg import x", []),  # relative imports name no package
    ("Import the library and call it.", []),  # prose, not a statement
    ("We import data from the file.", []),
    ("import os\nimport os.path", ["os"]),  # one atom per package
    ("", []),
])
def test_extract_imports(text, expected):
    assert extract_imports(text) == expected


def _index(tmp_path, lines):
    path = tmp_path / "names.txt.gz"
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return PackageIndex.from_file(path)


def test_pep503_normalisation():
    assert normalize("Foo__Bar.baz") == "foo-bar-baz"
    assert normalize("zope.interface") == "zope-interface"


def test_index_lookup(tmp_path):
    idx = _index(tmp_path, ["numpy", "Scikit_Learn", "opencv-python", "", "bad name!", "zope.interface"])
    assert idx.skipped_lines == 1
    assert idx.lookup("numpy") == (True, "pypi")
    assert idx.lookup("scikit_learn")[0] and idx.lookup("SCIKIT-LEARN")[0]
    assert idx.lookup("zope_interface")[0]
    assert idx.lookup("os") == (True, "stdlib")
    # the standard library is matched exactly, as `import` does
    assert idx.lookup("Queue")[0] is False and idx.lookup("cprofile")[0] is False
    assert idx.lookup("my_local_module") == (False, "not in stdlib or PyPI snapshot")
    # import names of differently named projects only when asked for
    assert idx.lookup("cv2")[0] is False
    assert idx.lookup("cv2", aliases=True) == (True, "pypi (import name of opencv-python)")


def test_index_errors(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(DataError, match="holds no project names"):
        PackageIndex.from_file(empty)
    broken = tmp_path / "broken.txt.gz"
    broken.write_bytes(b"\x1f\x8b not really gzip")
    with pytest.raises(DataError, match="cannot read the package index"):
        PackageIndex.from_file(broken)


def test_real_snapshot_loads():
    from tests.conftest import SHARED_DATA

    path = SHARED_DATA / "pypi" / "project-names.txt.gz"
    if not path.exists():
        pytest.skip("../shared/data is not beside this checkout")
    idx = PackageIndex.from_file(path)
    assert len(idx.names) > 800_000
    assert idx.lookup("requests")[0] and idx.lookup("json")[0]
    assert "sys" in sys.stdlib_module_names
