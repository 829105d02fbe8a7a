"""One module per CLI verb group; each exposes `<verb>_command(args) -> int`."""
