"""What a job is given and may touch, whichever executor runs it: its environment (and how it reaches
the job alone), its files and paths, the account it runs as, its resource requests."""
