"""mok: a deterministic expert-parallel Mixture-of-Experts layer, as PyTorch operators and an nn.Module.

    layer = mok.MoELayer(hidden=1024, expert_width=512, num_experts=64, top_k=6, process_group=ep_group)
    y = layer(x, expert_ids, router_weights)        # routing comes from the caller's router

python/README.md describes the build; docs/semantics.md is the layer's contract.
"""

from mok import _library

_library.load()

from mok import ops  # noqa: E402  (the fake kernels need the operators loaded above)
from mok.distributed import Communicator, communicator_for  # noqa: E402
from mok.functional import Config, Layer, moe  # noqa: E402
from mok.module import MoELayer  # noqa: E402

__all__ = ["Communicator", "Config", "Layer", "MoELayer", "communicator_for", "moe", "ops"]
