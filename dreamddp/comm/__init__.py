"""Communication layer: paced, accounted collectives and link models.

The bottom layer of dreamddp (imports nothing else from the package).
``link`` models the network, ``communicator`` runs real torch.distributed
collectives paced by a link, ``fake`` is an in-process stand-in for tests.
"""

from dreamddp.comm.communicator import CollectiveRecord, Communicator, Handle
from dreamddp.comm.fake import FakeCall, FakeCommunicator
from dreamddp.comm.link import (
    BACKENDS,
    EmulatedLink,
    IdealLink,
    Link,
    build_link,
    collective_time,
    ring_factor,
)

__all__ = [
    "BACKENDS",
    "CollectiveRecord",
    "Communicator",
    "EmulatedLink",
    "FakeCall",
    "FakeCommunicator",
    "Handle",
    "IdealLink",
    "Link",
    "build_link",
    "collective_time",
    "ring_factor",
]
