"""ray-gitops agent side: specs, planning, applying, the agent loop and its CLI.

Nothing in this package defines or runs Ray actors; it talks to the
controller through `controller.client`. `__version__` is the installed
distribution's version, so `gitops --version` says what pip installed.
`agent_address` is how client commands find the running agent;
`serving_health` says how each backend served in the last minute and which
answer 5xx (logged rate-limited).
"""

from importlib.metadata import version

__version__ = version("ray-gitops")
