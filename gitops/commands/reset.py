"""`gitops reset-controller`: discard the controller's stored state.

The documented way out when the controller cannot read its checkpoint (one
written by a newer ray-gitops, or damaged): the checkpoint is deleted from
the cluster's KV under `--namespace` (another namespace's controller keeps
its state), and the next `gitops run` starts a fresh controller and
re-applies everything from git. Refuses while that controller runs. Must not:
touch replicas or proxies (the next agent adopts or replaces them).
"""

from __future__ import annotations

import argparse

from gitops.errors import UserError

__all__ = ["reset_controller_command"]


def reset_controller_command(args: argparse.Namespace) -> int:
    from controller.client import discard_checkpoint
    from controller.cluster import init_ray, shutdown_ray
    init_ray(args.ray_address)
    try:
        existed = discard_checkpoint(args.namespace)
    except RuntimeError as error:
        raise UserError(str(error)) from None
    finally:
        shutdown_ray()
    where = f"in Ray namespace '{args.namespace}'"
    print(f"discarded the controller's checkpoint {where}" if existed else f"no controller checkpoint was stored {where}")
    return 0
