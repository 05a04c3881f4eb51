"""The server's durable state: its state folder (private, locked), the SQLite store, the checks
before it is opened, job ids that never repeat, and the queries every other part reads and writes
the store through."""
