"""ray-gitops agent side: specs, planning, applying, the agent loop and its CLI.

Nothing in this package defines or runs Ray actors; it talks to the
controller through `controller.client`. `__version__` is the installed
distribution's version, so `gitops --version` says what pip installed.
`secrets` decrypts the commit's age-encrypted secrets and sends them to the
controller sealed (docs/secrets.md); `commands.secret` helps authors encrypt.
"""

from importlib.metadata import version

__version__ = version("ray-gitops")
