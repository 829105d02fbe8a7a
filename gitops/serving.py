"""Deprecated: the user API moved to its own package, `ray_gitops.serving`
(`from ray_gitops import serving`). This old name still works for one release
(it is that very module) and warns, pointing at the import that uses it.
"""

import sys
import warnings

from ray_gitops import serving as _moved

warnings.warn(
    "gitops.serving moved to ray_gitops.serving: write `from ray_gitops import serving`; "
    "the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _moved
