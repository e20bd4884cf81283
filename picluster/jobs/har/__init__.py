"""HAR training: the thesis's deep residual bidirectional LSTM, between-graph replicated on ps/worker tasks.

config.py (TrainConfig), model.py (the network from TF ops), replica.py (one worker's client),
job.py (the coordinator), metrics.py (scores, metrics.csv), progress.py (what the user sees).
"""
