"""The example spec repository that `gitops run` serves by default.

The `*.toml` files here are the specs; `apps/` holds the user code they
import (`deployments.apps.<module>:<attribute>`, resolved from the repo root).
"""
