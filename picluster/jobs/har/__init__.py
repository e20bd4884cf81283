"""HAR training: the thesis's deep residual bidirectional LSTM, between-graph replicated on ps/worker tasks.

On the coordinator:  config.py (TrainConfig, validated once), coordinator.py (attach a cluster,
                     start the clients, follow the chief), clients.py (a client per worker task:
                     a local process or one over SSH), mirror.py (which of the chief's files
                     go to and come back from its node's job folder, and when),
                     progress.py (epoch lines and the live panel), data.py (the windows, checked).
In each replica:     replica.py (the training loop), graph.py (the graph it builds, composed from
                     the kind of exchange/: the ps, the all-reduce, the emulator), model.py
                     (the network), chief.py (worker 0: evaluate, select on validation, save),
                     checkpoints.py (the newest intact checkpoint to resume from), metrics.py
                     (scores and metrics.csv).
"""
