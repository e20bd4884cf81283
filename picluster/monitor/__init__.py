"""Watching the nodes: the agent on each node, reading it, and polling every node for the views.

agent.py     the node agent (python -m picluster.monitor.agent): node_exporter's names in Prometheus text format
cgroup.py    the agent's own cgroup (a test host's limits and use)
scrape.py    one scrape of an agent becomes a NodeStats; two give CPU use and network rates
poll.py      Monitor: every node's agent and task states, for `top` and the live panels
footprint.py what a node's processes hold in memory, per process and for the node
"""
