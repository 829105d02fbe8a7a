"""The controller's policies: pure functions and small tallies the state machines apply.

Owns how numbers become decisions and text, with every input passed in (no
Ray, no clock, no state of the controller's own): `autoscaling` (how many
replicas an autoscaled backend should run), `rollouts` (how a rollout step
passes or fails), `request_totals` (requests summed over proxies),
`recent_requests` (each backend's and endpoint's requests of the last
minute, for the status) and `failure_text` (a replica's exception as one
line with its innermost user frame). They import none of each other's nor
anything else of the controller's.
"""
