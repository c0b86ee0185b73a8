"""The expert-parallel group's communicator (include/mok/comm.hpp), bootstrapped through torch.distributed.

Rank 0 of the group makes an NCCL unique id (mok::make_unique_id), torch.distributed broadcasts its bytes over the
group, and every rank creates the communicator from them (mok::create_communicator), collectively. One
communicator serves every layer of a model on the same group and device, so `communicator_for` keeps one per
(group, device).
"""

import weakref

import torch
import torch.distributed as dist

_communicators: dict = {}


class Communicator:
    """A communicator in mok's C++ registry; layers made with it keep it alive."""

    def __init__(self, group, device: torch.device):
        rank = dist.get_rank(group)
        size = dist.get_world_size(group)
        # Rank 0 sends the id, or the exception that kept it from making one, so that a failure (a build without
        # the CUDA backend, an NCCL error) raises on every rank instead of leaving ranks 1.. waiting.
        payload = [None]
        if rank == 0:
            try:
                payload[0] = bytes(torch.ops.mok.make_unique_id().tolist())
            except RuntimeError as error:
                payload[0] = error
        dist.broadcast_object_list(payload, group=group, group_src=0)
        if isinstance(payload[0], Exception):
            raise payload[0]
        unique_id = torch.frombuffer(bytearray(payload[0]), dtype=torch.uint8)
        self.rank = rank
        self.size = size
        self.device = device
        self.id = torch.ops.mok.create_communicator(unique_id, rank, size, device.index)
        self._finalizer = weakref.finalize(self, torch.ops.mok.destroy_communicator, self.id)


def communicator_for(group, device: torch.device) -> Communicator:
    """The communicator of `group` on `device` (a CUDA device with its index), created on first use: collective,
    so every rank of the group asks for it at the same point."""
    key = (group, device.index)
    if key not in _communicators:
        _communicators[key] = Communicator(group, device)
    return _communicators[key]
