"""Notifications: what the agent did, carried to webhooks, Slack and commit statuses.

`events` derives events from two ticks' outcomes (pure); `links` builds the
URLs an event points at (pure); `config` reads the `--notify` file (pure,
errors with FILE:LINE:COL); `formats` turns an event into one provider's
HTTP request (pure); `delivering` is the only I/O: a bounded queue and a
retrying sender per provider that never blocks the reconcile loop.
"""
