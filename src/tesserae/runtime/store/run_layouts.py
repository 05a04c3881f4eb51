"""The layouts of the runs of an executor that spreads a run over several nodes (``ray``, ``slurm``): which parts,
on which nodes, with which ranks, by run folder. A restarted server reads them back to find every part.

Each such executor has a table of its own (``ray_runs``, ``slurm_runs``), made when the executor opens the store;
a layout is the executor's JSON document, written before any part of the run starts.
"""

from __future__ import annotations

from tesserae.runtime.store.database import Store

#: The executors that keep layouts, and so the tables there may be.
EXECUTORS = ("ray", "slurm")


class RunLayouts:
    """One executor's table of layouts (``<executor>_runs``: run folder -> JSON layout)."""

    def __init__(self, store: Store, executor: str) -> None:
        if executor not in EXECUTORS:
            raise ValueError(f"no layout table for executor '{executor}'")
        self.store, self.table = store, f"{executor}_runs"
        store.execute(f"CREATE TABLE IF NOT EXISTS {self.table} (run_dir TEXT PRIMARY KEY, layout TEXT NOT NULL)")

    def save(self, marker: str, layout: str) -> None:
        """Record (or replace) the layout of the run ``marker``."""
        self.store.execute(f"INSERT OR REPLACE INTO {self.table} (run_dir, layout) VALUES (?, ?)", (marker, layout))

    def load(self, marker: str) -> str | None:
        """The recorded layout of the run ``marker``, or None."""
        row = self.store.one(f"SELECT layout FROM {self.table} WHERE run_dir=?", (marker,))
        return None if row is None else str(row["layout"])

    def all(self) -> list[tuple[str, str]]:
        """Every recorded (run folder, layout), in run-folder order."""
        return [(str(r["run_dir"]), str(r["layout"]))
                for r in self.store.query(f"SELECT run_dir, layout FROM {self.table} ORDER BY run_dir")]

    def forget(self, marker: str) -> None:
        """Drop the layout of the run ``marker`` (its parts have all been reaped)."""
        self.store.execute(f"DELETE FROM {self.table} WHERE run_dir=?", (marker,))
