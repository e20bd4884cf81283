"""Jobs through Slurm: ``picluster submit``'s batch script, and the queue as ``jobs``, ``logs`` and
``cancel`` see it.

batch.py    the request (nodes, ps, CPUs, time, memory, node list, name, command) checked, and its batch script
script.py   a user's job script read: its directives, interpreter, folder, mail and what is said of each
options.py  sbatch's options: #SBATCH lines checked, and what this cluster would refuse of any option
sge.py      SGE's #$ lines translated into sbatch's options, or said as not honoured, or refused
sge_values.py  SGE's values (resources, queues, mail letters, dates, sizes, times, paths) as sbatch's
origin.py   where submit was typed, and so the folder a job runs in on its nodes
queue.py    the controller asked over SSH: sbatch, squeue, sacct, scontrol, scancel, and a job's output
rows.py     a job as squeue and sacct print it (the formats asked for), read back as untrusted text
failure.py  why a job ended before its script ran (or waits for a node), from Slurm's records and the node's log
follow.py   a job's output file followed while it runs (logs -f)
"""
