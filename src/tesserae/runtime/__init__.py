"""The runtime (DESIGN §7): run real jobs with the scheduler core that drives the simulator.

How the pieces fit (``a -> b``: a calls b; nothing calls back up, and the simulator imports none of it):

- ``server`` wires one process: ``state_folder`` (private, locked, the checked ``store``),
  ``make_executor``, the ``controller`` thread, and uvicorn serving ``api`` (and ``tesserae.web``).
- ``controller`` -> ``reconcile`` (start-up), ``reaping`` (every tick), ``rounds`` (store -> JobTable
  -> ``tesserae.scheduler.Scheduler.decide`` -> Plan) and ``apply`` (stops, then starts). Every
  change to a run is a write-ahead step of ``runs.RunBook``; ``faults`` marks those steps.
  ``rounds`` also installs a replaced tenant queue config (``tenancy``) before a decision and
  hands the state after it to ``prediction`` (predicted starts, simulated in a thread of its own).
- ``executor.Executor`` is all the controller knows of where jobs run: ``local_executor``
  (``launcher``, ``procs``, ``lifetime``, ``gpus``) or ``ray_executor`` (``ray_connect``,
  ``ray_nodes``, ``ray_gangs``, ``ray_recovery``; ``ray_agent`` and ``ray_launcher`` on the nodes).
  Both launchers share ``supervise``. A job's environment is ``job_env``; its files ``job_paths``
  and ``job_files`` (read as hostile); who it runs as ``isolation``.
- ``api`` (``api_jobs``, ``api_queues``, ``api_what_if``, ``api_models``, ``api_views``, ``api_limits``)
  <- ``client`` <- ``commands``
  (the ``tesserae`` CLI, one module per command). The job-side library is ``tesserae.job``.

Extension points: a new executor implements ``Executor`` and is named in ``server.make_executor``;
a job lifecycle control is a step of ``RunBook`` (and what ``rounds.build_table`` lets the
scheduler see); a group of routes is a module with ``add_..._routes`` called from
``api.create_app``; a command is a module of ``commands`` with a ``register``.
"""
