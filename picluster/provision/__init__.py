"""`picluster provision`: bring every inventory node to the state the cluster needs, idempotently.

runner.py fans the steps out over the nodes (steps/ holds one module per step group), remote.py
is the SSH side (sudo without a password, idempotent file writes), result.py the per-node
results and report.py their display.  The configuration files come from the top-level nfs/
directory (templates.py), which the Ansible roles under ansible/ render too.
"""
