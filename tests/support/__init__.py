"""What the tests share that is not a fixture: one place, imported by every tier.

- `tiers`: the four tiers by cost (pure, component, real, slow), the tier of
  each collected test (from its folder, its marks and the named slow files),
  and what marks a test as one that starts Ray.
- `collected`: a pytest plugin that writes, for each collected test, its
  tiers and whether it starts Ray, as JSON lines (the pure checks of the
  tiers read it from a `--collect-only` run).

A test module imports helpers from here, never from another test module.
"""
