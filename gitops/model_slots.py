"""Deprecated: the models a multiplexed replica keeps loaded moved to
`ray_gitops.model_slots` (users decorate with `@ray_gitops.serving.multiplexed`).
This old name still works for one release (it is that very module) and warns,
pointing at the import that uses it.
"""

import sys
import warnings

from ray_gitops import model_slots as _moved

warnings.warn(
    "gitops.model_slots moved to ray_gitops.model_slots (users decorate with "
    "`@ray_gitops.serving.multiplexed`); the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
