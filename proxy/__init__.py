"""ray-gitops data plane: the HTTP proxy actor, one per Ray node."""
