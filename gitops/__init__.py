"""ray-gitops agent side: specs, planning, applying, the agent loop and its CLI.

Nothing in this package defines or runs Ray actors; it talks to the
controller through `controller.client`. `__version__` is the installed
distribution's version, so `gitops --version` says what pip installed.

- `proxy_start`: a starting agent waits for its proxies; one that cannot
  start is a one-line error, naming who holds its port (`port_holders`).
"""

from importlib.metadata import version

__version__ = version("ray-gitops")
