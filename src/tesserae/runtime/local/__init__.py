"""The ``local`` executor: every run of a job is a process tree on this machine, started by a small
launcher that outlives the controller."""
