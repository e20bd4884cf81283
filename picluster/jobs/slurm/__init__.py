"""Jobs through Slurm: ``picluster submit``'s batch script, and the queue as ``jobs``, ``logs`` and
``cancel`` see it.

batch.py   the request (nodes, ps, CPUs, time, memory, node list, name, command) checked, and its batch script
script.py  a user's job script: its #SBATCH lines checked, its SGE #$ lines translated into sbatch's options
queue.py   the controller asked over SSH: sbatch, squeue, sacct, scancel, and a job's output
rows.py    a job as squeue and sacct print it (the formats asked for), read back as untrusted text
follow.py  a job's output file followed while it runs (logs -f)
"""
