"""The ``slurm`` executor: Tesserae schedules a Slurm partition (``executor`` says how; docs/slurm.md).

- ``executor``: the ``Executor`` (view, runs, stops, fencing, restarts);
- ``commands``: Slurm's client commands, run with a fixed environment and a timeout;
- ``settings``: the slurm.conf settings checked at start;
- ``nodes``: the partition's nodes, their per-GPU GRES and states, the cluster view;
- ``runs``: runs as gangs of one Slurm job per node, their records in the store;
- ``lease``: the lease file that fences runs Slurm cannot stop;
- ``launcher``: each part's batch script on its node (standard library only).
"""
