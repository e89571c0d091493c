"""The planner: how few nodes a training job can run on (planner.py, over models.py's parameter and
FLOP counts and bounds.py's checked numbers), and the launcher that submits and starts it (launch.py,
torchtitan.py). The commands `transit plan|submit|launch` are in cli.py."""
