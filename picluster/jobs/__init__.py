"""The jobs picluster runs on a cluster, one package each.

montecarlo/  the distributed Monte-Carlo estimate of pi: estimate, report, sweep
har/         HAR training: the residual bidirectional LSTM, between-graph replicated
"""
