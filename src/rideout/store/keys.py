"""Every Redis key rideout uses, in one place (like arq's constants).

All keys share the ``rideout:`` prefix so a shared Redis can be inspected or cleaned
without touching anything else. Functions build keys that carry a name; ``{room}``
hash tags keep a room's keys in one slot should a deployment move to Redis Cluster.
"""

from __future__ import annotations

__all__ = ["EPOCH", "PREFIX"]

PREFIX = "rideout:"

# The writer's epoch: an integer the failover controller increases on every promotion.
# Together with a stream offset it names a position in a room's history.
EPOCH = PREFIX + "epoch"
