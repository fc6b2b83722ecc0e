"""Shared fixtures: the package from this checkout, and pydantic where it is required."""

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def require_pydantic():
    """pydantic, or a skip; under CI=true a missing pydantic fails instead (CI installs it)."""
    try:
        import pydantic
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail("pydantic is not installed, and CI must run the pydantic tests (make test-sdk installs it)")
        pytest.skip("pydantic is not installed")
    if not hasattr(pydantic.BaseModel, "model_json_schema"):
        pytest.skip("pydantic 1 is installed; forge_tools supports pydantic 2")
    return pydantic
