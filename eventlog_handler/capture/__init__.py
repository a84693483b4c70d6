"""The caller's-thread side: what is admitted, and the entry that snapshots a record,
structlog event or exception (plus the context: user, tags, request scope, and the trace log)."""
