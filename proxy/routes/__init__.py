"""The route table a request reads once, and what each endpoint in it decides.

- `snapshot`: the immutable route table, endpoints and replica pools;
- `subscriptions`: long-poll payloads -> snapshot;
- `routing`: longest-prefix match, 405, path normalisation (pure);
- `steering`: header and JSON match rules, sticky key (pure);
- `rate_limits`: per-tenant token buckets (pure);
- `token_budgets`: per-tenant LLM token budgets in those buckets: estimate, usage, settlement (pure).
"""
