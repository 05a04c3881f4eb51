"""The runtime (DESIGN §7): run real jobs with the scheduler core that drives the simulator.

One package a part, each importing only the ones below it (nothing calls back up, the simulator
imports none of it, and the runtime never imports ``tesserae.web``):

- ``commands/``: the ``tesserae`` CLI's runtime commands, one module each; they talk to a server
  through ``client`` (HTTP), and ``tesserae server`` runs ``server``.
- ``server``: one process: the state folder, the executor, the controller thread, and uvicorn
  serving the API and what its caller mounts besides (the dashboard: ``tesserae.cli`` passes it);
  ``detach`` runs it in the background.
- ``api/``: the HTTP API: ``app`` (errors, server routes), ``auth`` (the one token check), the
  route groups (``jobs``, ``lifecycle``, ``accounting``, ``queues``, ``what_if``, ``cluster``),
  what it accepts (``models``, ``limits``) and answers (``views``).
- ``controller/``: the decision loop (``loop``): ``reconcile`` at start-up, ``reaping`` every
  tick, ``rounds`` (store -> JobTable -> ``Scheduler.decide`` -> Plan), ``apply`` (stops, then
  starts), every change to a run a write-ahead step of ``runs.RunBook`` (``faults`` marks them,
  ``outcomes`` reads a run's end); and what it knows of waiting jobs: ``lifecycle`` controls,
  ``pending`` reasons, ``tenancy`` (tenant queues), ``prediction`` (predicted starts, what-if).
- ``local/`` and ``ray/``: the two executors (``ray``: agents on the nodes, gangs of parts, leases,
  recovery after a restart).
- ``executor/``: what the controller knows of where jobs run: the ``Executor`` protocol, GPU
  identity (``gpus``), a node's network for its jobs (``node_net``).
- ``store/``: the state folder and the SQLite store, and every query on it (``jobs``,
  ``allocations``, ``counts``, ``accounting``, ``run_layouts``): no SQL elsewhere.
- ``launch/``: what every launcher shares on a node (``supervise``, ``procs``, ``lifetime``).
- ``job/``: what a job is given and touches: ``env`` (and ``env_handoff``), ``files``, ``paths``,
  ``isolation`` (who it runs as), ``resources``. The job-side library is ``tesserae.job``.

Extension points: a new executor implements ``executor.protocol.Executor`` and is named in
``server.make_executor``; a job lifecycle control is a step of ``controller.runs.RunBook`` (and
what ``controller.rounds.build_table`` lets the scheduler see); a group of routes is a module of
``api`` with an ``add_..._routes`` called from ``api.app.create_app``; a query is a function of
``store``; a command is a module of ``commands`` with a ``register``.
"""
