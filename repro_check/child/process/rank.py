"""Inside one rank of a torchrun job: what its trace header says and how its steps are recorded."""

from __future__ import annotations

import functools
import os
import weakref
from typing import Any

from repro_check.child.observe import capture
from repro_check.trace import fingerprint


def rank_header() -> dict[str, Any]:
    """What the trace header says about this rank (torchrun's environment)."""
    env = os.environ

    def num(name: str, default: int) -> int:
        try:
            return int(env.get(name, default))
        except ValueError:
            return default

    return {"distributed": {
        "rank": num("RANK", 0), "local_rank": num("LOCAL_RANK", 0),
        "world_size": num("WORLD_SIZE", 1), "local_world_size": num("LOCAL_WORLD_SIZE", 1),
        "node_rank": num("GROUP_RANK", 0), "restart_count": num("TORCHELASTIC_RESTART_COUNT", 0),
    }}


class RankRecorder(capture.Recorder):
    """The step recorder of one rank: adds the ``params`` fingerprint of every
    DistributedDataParallel model after each optimizer step."""

    def __init__(self, emit: capture.Emit, max_steps: int | None = None, **options: Any) -> None:
        super().__init__(emit, max_steps, **options)
        self._models: list[weakref.ref[Any]] = []

    def install(self) -> RankRecorder:
        super().install()
        from torch.nn.parallel import DistributedDataParallel

        models = self._models

        def make(original_init: Any) -> Any:
            @functools.wraps(original_init)
            def ddp_init(ddp: Any, *args: Any, **kwargs: Any) -> None:
                original_init(ddp, *args, **kwargs)
                models.append(weakref.ref(ddp.module))

            return ddp_init

        self.hooks.replace("rank.models", DistributedDataParallel, "__init__", make)
        return self

    def params_fingerprint(self, optimizer: Any) -> fingerprint.Fingerprint:
        """Every parameter of the DDP models (what must agree across ranks), or the optimizer's
        when there is no DDP model. On a GPU the digest stays on the device until flushed."""
        live = [m for m in (ref() for ref in self._models) if m is not None]
        if not live:
            return super().params_fingerprint(optimizer)
        return fingerprint.tensors(((f"{i}.{name}", p) for i, m in enumerate(live)
                                    for name, p in m.named_parameters()), defer=True)
