"""TRANSIT's benchmark suite: the training harness (train.py, deepspeed_train.py, model.py,
common.py) and the protocol that runs its experiments (protocol.py, `python -m bench`)."""
