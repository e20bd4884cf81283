"""``picluster launch``: the user's own TensorFlow program on the running cluster.

config.py    what was asked: the script (it must exist and compile), its arguments, mode, --dir, limits
plan.py      which tasks run where, each with its TF_CONFIG (coordinator: a chief here; each-worker: one per worker)
output.py    each task's log, the prefixed stream, and the summary folded across nodes
policy.py    the failure policy: TFJob's exit-code classes and the job's restart budget
launcher.py  the coordinator: record, attach, stage and start through the cluster (Cluster.stage, start_task: the
             inventory's nodes put the script on the share or copy it, cluster/staging.py), watch (exits, server probes), stop, record
"""
