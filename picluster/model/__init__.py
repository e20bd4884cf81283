"""The cluster's model: the inventory, node sets, the ClusterSpec, checked strings, node stats,
and work fanned out over nodes. Below the clusters and jobs; above the utilities only."""
