"""Monte-Carlo pi: estimate.py (the graph and its rounds), report.py (text, JSON, CSV, table), sweep.py (Table 5)."""
