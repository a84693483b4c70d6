"""The local collector: the service's API on loopback with SQLite storage and a dashboard."""
