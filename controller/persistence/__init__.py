"""The controller's checkpoint: its form and where it is stored.

Owns `checkpoint` (the versioned JSON envelope, written before any actor is
started or stopped; JSON only, never pickle, so no class or module path is
stored and moving code never breaks recovery) and `ray_kv` (its storage in
Ray's internal KV, one key per namespace). What goes inside is the state
machines' JSON form; this package does not interpret it.
"""
