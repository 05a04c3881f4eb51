"""The runtime (DESIGN §7): run real jobs with the scheduler core that drives the simulator.

``server`` (process wiring), ``controller`` (rounds: store -> JobTable -> Scheduler.decide -> apply),
``store`` (SQLite, WAL), ``executor`` + ``launcher`` + ``procs`` (the local executor: job processes,
exit codes that outlive the controller, adoption after a restart), ``gpus`` (NVML or virtual GPUs),
``api`` (FastAPI), ``client`` and ``cli_commands`` (the ``tesserae`` client commands). The job-side
library is ``tesserae.job``. Nothing here is imported by the simulator.
"""
