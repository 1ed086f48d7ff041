"""DDP communication hooks for the "hccl" backend (ddp.register_comm_hook(group, hook))."""
import torch.distributed as dist

from .torch import ProcessGroupHCCL


def registered_allreduce_hook(group, bucket):
    """DDP's own allreduce hook (the gradients divided by the group's size, then summed), with
    each bucket's buffer registered with hcclD the first time the hook sees it
    (ProcessGroupHCCL.register_bucket), so that every later step reduces the bucket where it
    lies instead of copying it through the shared arena. group: the DDP's process group (None:
    the default one); with another backend's group it is DDP's default hook."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()  # noqa
    tensor = bucket.buffer()
    if isinstance(pg, ProcessGroupHCCL):
        pg.register_bucket(bucket.index(), tensor)
    tensor.div_(pg.size())
    return pg.allreduce([tensor]).get_future().then(lambda fut: fut.value()[0])
