"""The HTTP API (FastAPI): the app, its one authentication dependency, and its routes (jobs,
lifecycle, accounting, tenant queues, what-if, cluster views), with the bounds and shapes of what
it accepts and answers."""
