"""The jobs picluster runs on a cluster, one package each.

montecarlo/  the distributed Monte-Carlo estimate of pi: estimate, report, sweep
har/         HAR training: the residual bidirectional LSTM, between-graph replicated
launch/      the user's own TensorFlow script (``picluster launch``), in coordinator or each-worker mode
records.py   the record of every job of the three kinds (SQLite in the state directory)
record_schema.py  its schema, checked on open, and each row read back checked value by value
"""

# The modules whose clients run inside a node's server, through its door (cluster/door.py): the
# door imports them while it waits for its first knock, so no run pays for their imports.
DOOR_JOBS = ("picluster.jobs.har.replica",)
# What they read from the cluster's share, read once the server serves (door.py, Door.read_ahead):
# each called with the share's mount on the node; it returns what it read, for the server's log.
DOOR_READ_AHEAD = ("picluster.jobs.har.data:warm",)
