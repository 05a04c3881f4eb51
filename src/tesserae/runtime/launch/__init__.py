"""What every launcher shares on the node that runs a job: starting and supervising the copies of its
command, knowing its processes again by ``/proc``, and ending its whole process tree (cgroups).
Standard library only, so a launcher starts fast."""
