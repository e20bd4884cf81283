"""Rich views: each takes data and returns a renderable; none reads the cluster itself."""
