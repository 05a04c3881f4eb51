"""The server's durable state: its state folder (private, locked), the SQLite store, the checks
before it is opened, job ids that never repeat, and the queries every other part reads and writes
the store through.

Every SQL statement of the server is in this package: ``database`` (schema, migrations, meta,
events, tokens), ``jobs`` (one job, the lists, every change to a job outside its runs),
``allocations`` (the runs and their write-ahead records), ``counts`` (totals for the API and
``/metrics``), ``accounting`` (windows and GPU-hours), ``run_layouts`` (the Ray executor's run
layouts). The rest of the runtime calls these functions and never writes SQL, so an index, a
bound or cursor paging for a large store is added in one place: the query function that needs it.
"""
