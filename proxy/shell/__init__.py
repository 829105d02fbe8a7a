"""The I/O shell around the request path: Ray, the controller, the node's shared files.

- `raycalls`: replica calls over Ray (and the data connections' Ray side);
- `controller_link`: the controller actor, looked up by name;
- `longpoll_client`: the long poll that brings route tables in;
- `load_reporting`: the backends' load, pushed to the controller;
- `shared_ports`: ports one node's workers share;
- `shared_buckets`: the tenants' token buckets a node's workers share, in a memory-mapped file.
"""
