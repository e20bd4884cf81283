"""Day-2 chores on an inventory's nodes: reboot, upgrade and shut down, in an order that keeps
the cluster whole (order.py), each node checked back before the next (health.py, chores.py)."""
