"""A model's pin (`[models.NAME]`'s source and sha256): what it binds, which automation moves it, how it is rewritten.

- `pinned_models`: `[models.NAME]` bound to the backends naming them, a
  model's digest part of their version;
- `automation`: the `[automation.NAME]` tables of the repository's
  automation file (which moving reference moves which model's pin), checked;
- `pin_edits`: a model's new pin written into its spec file, comments and
  layout kept.

Pure: values and text in, values and text out. Must not: import one
another, or the loader (`gitops.specs.loading` reads these, never the other
way; the layers of `gitops.specs` and an independence contract in
`pyproject.toml` keep both); reading the models' stores and registries is
the verbs' (`gitops.commands.models`).
"""
