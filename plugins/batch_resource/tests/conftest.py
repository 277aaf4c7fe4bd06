import pytest
import structlog


@pytest.fixture(autouse=True)
def _fresh_structlog():
    """``koordfw.cli.main`` configures structlog to print to the sys.stderr of that moment, which under
    capsys is a capture file closed after the test; reset so later warnings do not hit a closed file."""
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()
