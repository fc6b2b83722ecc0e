"""Fixtures of the E2B SDK suite (scripts/test-e2b.sh starts forge and sets the environment).

The SDKs find forge through their own environment variables only: E2B_API_URL, E2B_SANDBOX_URL
and E2B_API_KEY (a forge token of tenant A). The suite itself also reads FORGE_TEST_E2B_KEY_B (a
token of a second tenant) and FORGE_TEST_E2B_MAX_FILE_SIZE (forge's volumes.max_file_size). A missing
variable fails the run: this suite never skips.
"""

import os

import pytest
from e2b_code_interpreter import AsyncSandbox, Sandbox

# Every sandbox of the suite ends by itself if a test dies before killing it.
LIFETIME = 120


def env(name):
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run the suite through scripts/test-e2b.sh", pytrace=False)
    return value


def pytest_configure(config):
    for name in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "FORGE_TEST_E2B_KEY_B", "FORGE_TEST_E2B_MAX_FILE_SIZE"):
        if not os.environ.get(name):
            raise pytest.UsageError(f"{name} is not set: run the suite through scripts/test-e2b.sh")


@pytest.fixture
def key_b():
    return env("FORGE_TEST_E2B_KEY_B")


@pytest.fixture
def max_file_size():
    return int(env("FORGE_TEST_E2B_MAX_FILE_SIZE"))


@pytest.fixture
def sandbox():
    sbx = Sandbox.create(timeout=LIFETIME)
    try:
        yield sbx
    finally:
        sbx.kill()


@pytest.fixture
async def async_sandbox():
    sbx = await AsyncSandbox.create(timeout=LIFETIME)
    try:
        yield sbx
    finally:
        await sbx.kill()
