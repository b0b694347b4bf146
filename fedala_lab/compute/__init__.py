"""Per-client computation, below both the algorithms and the round loop that uses them.

- ``steps.py``: a step is one client's pure function of one batch (plain SGD, evaluation, the loss);
- ``backends.py``: run a step over many clients' batches, a client at a time or vectorised (vmap);
- ``workers.py``: local SGD in worker processes on a CPU, a client at a time in each (shared memory);
- ``rng.py``: every random draw, from a generator derived from (seed, round, client, purpose).

The engine's round loop runs local training and evaluation on them; ALA (algorithms/ala.py) runs its
weight-learning steps on them, inside a simulation or in anyone's training loop.
"""
