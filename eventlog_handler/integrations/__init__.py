"""Where the package meets the runtime: exception hooks, servers' loggers, signals, and the
request data shared by the web middlewares."""
