"""ray-gitops agent side: specs, planning, applying, the agent loop and its CLI.

Nothing in this package defines or runs Ray actors; it talks to the
controller through `controller.client`. `__version__` is the installed
distribution's version, so `gitops --version` says what pip installed.

Environments (docs/environments.md): `cron` (five-field schedules, pure),
`syncwindows` (whether a new commit may apply now, pure), `promotion` (the
promotion gates, pure), `promoting` (carrying a promotion out: a
fast-forward push or a GitHub/GitLab pull request).
"""

from importlib.metadata import version

__version__ = version("ray-gitops")
