"""What the tests (and the benchmarks that share a harness with them) build on, in one package.

- ``specs``: jobs and specs, one hand-built decision, toy profiles;
- ``plans``: the plan checker (a scheduler that asserts every plan's invariants);
- ``cli``: the ``tesserae`` command run in this process, the one-line-error check;
- ``server``: a real ``tesserae server`` in a subprocess, its client calls, toy jobs;
- ``ray_cluster``: a local Ray cluster and a server on it;
- ``slurm_cluster``: real Slurm daemons on this machine (root);
- ``two_hosts``: two Linux "hosts" made of network namespaces (root);
- ``chaos``: a server whose controller is SIGKILLed at random, restarted, its jobs checked.

``tests/`` is on the path (pytest's ``pythonpath``; a benchmark inserts it): ``from support.server import Server``.
"""
