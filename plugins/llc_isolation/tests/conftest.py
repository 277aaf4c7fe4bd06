import pytest
import structlog


@pytest.fixture(autouse=True)
def _fresh_structlog():
    """``koordfw.cli.main`` binds structlog to the sys.stderr of its moment (a capture that closes
    after the test); give every test the default configuration back."""
    yield
    structlog.reset_defaults()
