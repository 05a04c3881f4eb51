"""The ``ray`` executor: jobs run on the GPU nodes of a Ray cluster, one agent actor per node, each run
a gang of parts with leases so that a cut-off node never runs a job twice."""
