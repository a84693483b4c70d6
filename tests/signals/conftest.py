from tests.transport.conftest import server  # noqa: F401 - the fault server fixture
