"""Replica pools and the calls made to their replicas.

- `sending`: the one call the request path makes: a request to a replica of a
  backend (slot, stall check, retries by the endpoint's policy, release);
- `retrying`: an endpoint's retry policy and a backend's retry budget (pure);
- `outliers`: outlier ejection: the replicas failing far more than their backend's others (pure);
- `circuit`: circuit limits: requests waiting for a backend and retries in flight to it (pure);
- `replicas`: per-backend pools, the wait queue, dead, stalled and ejected replicas;
- `stalls`: per-replica progress and the rule that finds a hung replica (pure);
- `multiplexing`: a multiplexed backend's model to a replica holding it (pure);
- `calling`: the caller seam and its errors;
- `replica_calls`: the one call stack (frames when connected, else coalesced Ray calls);
- `socketcalls`: one data connection per replica, calls as frames over it;
- `coalescing`: requests queued for one replica share one Ray call under load;
- `gathering`: a batched backend's requests gathered into lists.
"""
