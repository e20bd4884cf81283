"""HAR training: the thesis's deep residual bidirectional LSTM, between-graph replicated on ps/worker tasks.

Every module of the package, by where it runs (tests/test_package_map.py holds this map to the files):

On the coordinator:  job.py (HAR training as a job of the controller), coordinator.py (attach a
                     cluster, launch the clients, follow them, clean up), elastic.py (a sync run
                     that loses a task goes on: launches, restarts, the record of what was lost),
                     follow.py (one launch followed in the watch loop: records, exits, stalls),
                     clients.py (a client per worker task, and the evaluator, under the supervisor),
                     mirror.py (which of the chief's files go to and come back from its node, and
                     when), evaluator.py (validation and the test set beside the coordinator),
                     progress.py (epoch lines and the live panel), resume.py (what --resume goes
                     back to), shared_data.py (the data set on the cluster's share), rundir.py
                     (every file of a run's folder and its one writer).
Both sides:          config.py (TrainConfig, validated once), data.py (the windows, checked and
                     dealt out), folds.py (which volunteers validate), metrics.py (scores and
                     metrics.csv), trained.py (trained.jsonl: the chief's epochs for the evaluator),
                     checkpoints.py (the newest intact checkpoint to resume from).
In each replica:     process.py (a replica in a process of its own), replica.py (the training
                     loop, in that process or in a node's server through its door), graph.py (the
                     graph it builds, composed from the kind of exchange/), model.py (the residual
                     LSTM) and convlstm.py (the default convolutional-recurrent model), noise.py
                     (dropout and initial weights keyed by where the training is), augment.py (the
                     windows' augmentation), chief.py (the evaluation's duties: validate, select,
                     save, report), saving.py (each epoch's checkpoint beside the steps),
                     localsgd.py (post-local SGD), steptrace.py (a step's own ops against its
                     exchange), straggler.py (whom a sync step waited for).
The ps exchange's parts: placement.py (each variable on the ps holding the fewest bytes),
                     fusion.py (one flat tensor per ps task each way), sync.py (every worker's
                     gradient averaged per ps task, applied once).
exchange/            how a sync update's workers meet, one kind per module behind kind.py:
                     ps.py (the parameter servers), allreduce.py with group.py (the workers sum
                     between themselves over TCP), tree.py (groups summed before the ps),
                     collective.py (TensorFlow's collective all-reduce), emulated.py (the
                     statistics emulator: a sync cluster's update in one process).
"""
