from tests.support.fixtures import fault_server as server  # noqa: F401 - a FaultServer
