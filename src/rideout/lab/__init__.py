"""The network lab: many hosts on one machine, as network namespaces joined through one
router, with partitions and a WAN link (docs/lab.md).

- :mod:`.topology` (pure): names, addresses and the ``ip`` commands that build a lab;
- :mod:`.faults` (pure): partitions as one-way cuts and the router's rules for them;
- :mod:`.netns`: build, change and remove a lab (root only), run processes in its hosts;
- :mod:`.relay`: the userspace WAN link (latency, loss, bandwidth, stop) and its control.

Its errors derive from :class:`LabError`.
"""

from __future__ import annotations

from rideout.lab.errors import LabError

__all__ = ["LabError"]
