"""ray-gitops agent side: specs, planning, applying, the agent loop and its CLI.

Nothing in this package defines or runs Ray actors; it talks to the
controller through `controller.client`.
"""

__version__ = "0.1.0"
