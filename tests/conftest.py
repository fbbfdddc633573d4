"""Collect Hy tests (tests/**/test_*.hy) alongside Python ones."""

import hy  # noqa: F401  -- registers the .hy importer
import pytest


def pytest_collect_file(file_path, parent):
    if file_path.suffix == ".hy" and file_path.name.startswith("test_"):
        return pytest.Module.from_parent(parent, path=file_path)
