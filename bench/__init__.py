"""TRANSIT's benchmark suite: the training harness (train.py, deepspeed_train.py, model.py,
common.py) and the protocol that runs its experiments (experiments.py, planning.py, estimates.py,
protocol.py, summary.py; `python -m bench`)."""
