"""Utilities that know nothing of clusters: errors, paths, whole-file writes, process identity,
TensorFlow's log lines, usable CPUs. The bottom layer: they import nothing else of picluster."""
