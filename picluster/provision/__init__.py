"""`picluster provision`: bring every inventory node to the state the cluster needs, idempotently.

runner.py fans the steps out over the nodes (steps/ holds one module per step group);
picluster.cluster.ssh is the SSH side (sudo without a password, idempotent file writes);
result.py holds the per-node results and report.py their display.  The configuration files come
from files/*.j2 (templates.py; nfs/ at the top links there), which the Ansible roles under
ansible/ render too.
"""
