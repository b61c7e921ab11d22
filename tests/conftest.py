import os
import zlib
from pathlib import Path

import numpy as np
import pytest

# `python -m pytest` puts the checkout's root first on sys.path, where kernels/ (shipped as
# evireform.kernels) would shadow the PyPI package `kernels` that transformers imports;
# importing evireform first takes the root off (evireform._unshadow_kernels)
import evireform  # noqa: F401,E402

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("EVIREFORM_DATA", REPO.parent / "shared" / "data"))


def pytest_report_header(config):
    return f"evireform data: {DATA} ({'found' if DATA.exists() else 'MISSING'})"


@pytest.fixture
def rng(request):
    """A fresh generator per test, seeded from the test's name (never the global RNG)."""
    seed = zlib.crc32(request.node.nodeid.encode())  # stable across runs (hash() is salted)
    return np.random.default_rng(seed)


@pytest.fixture(scope="session")
def data_dir():
    if not DATA.exists():
        pytest.skip(f"evaluation data not found at {DATA}")
    return DATA
