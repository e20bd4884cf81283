"""Watching the nodes: the agent on each node, reading it, and polling every node for the views.

agent.py   the node agent (python -m picluster.monitor.agent): metrics in Prometheus text format
scrape.py  one scrape of an agent becomes a NodeStats; two give network rates
poll.py    Monitor: every node's agent and task states, for `top` and the live panels
"""
