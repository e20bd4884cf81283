"""The cluster runtime: TensorFlow ps/worker servers and the node agents, wherever they run.

attach.py    which cluster a job attaches to: its Slurm allocation, the inventory's, the running local one, or a temporary one
local.py     the embedded local cluster: servers as processes on 127.0.0.1
localstate.py  its cluster.json read back as untrusted input, value by value
inprocess.py the temporary local cluster of a job: every task's server in one process
nodecluster.py  servers and agents on inventory nodes, started over SSH
pidfiles.py  their node side, a script up ships: which run (pid and start), why one died, stopping them
allocation.py  a Slurm job's nodes: servers as one srun step, the job's processes started with srun
ssh.py       one node over SSH (Fabric): commands, sudo, idempotent file writes
server.py    TensorFlow tasks: one, or all of a temporary cluster (python -m picluster.cluster.server)
probe.py     readiness: does a task's port answer
lifetime.py  child processes that die with their coordinator, group signals, log tails
exits.py     processes that started and died: exit status and log tail, one error folded by node
tether.py    a command tied to a lifeline (python -m picluster.cluster.tether)
tasks.py     the one supervisor of a job's processes (launch's tasks, HAR's clients), each under the tether
shim.py      builds native/bindaddr.c, the LD_PRELOAD shim that keeps servers on their address
jobfolder.py   a job's own folder on a node (Cluster.job_folder), and its files over SFTP
"""
