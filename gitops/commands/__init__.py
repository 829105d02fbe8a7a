"""One module per CLI verb group; each exposes `<verb>_command(args) -> int`.

`run_environment` puts together the environment duties of `gitops run --environment`.
"""
