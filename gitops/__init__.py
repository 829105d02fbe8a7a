"""ray-gitops agent side: specs, planning, applying, the agent loop and its CLI.

Nothing in this package defines or runs Ray actors; it talks to the
controller through `controller.client`. `__version__` is the installed
distribution's version, so `gitops --version` says what pip installed.

Environments (docs/environments.md): `cron` (five-field schedules, pure),
`syncwindows` (whether a new commit may apply now, pure), `promotion` (the
promotion gates, pure), `evidence` (the proxies' request and shadow
counters a promotion is judged on), `promoting` (carrying a promotion out: a
fast-forward push or a GitHub/GitLab pull request), `environment_duties`
(what the agent of an environment does around its ticks: sync windows before
an apply, promotion after), `environment_status` (what the status says of the
environment, as typed values) and `environment_view` (that part of `gitops
status` as text).
"""

from importlib.metadata import version

__version__ = version("ray-gitops")
