"""ray-gitops HTTP edge: the HTTP/1.1 server of every listener of ours, with its bounds.

Serves the proxy's public listener and the agent's admin and webhook
listeners, which otherwise import nothing of each other. Modules: `server`
(the HTTP/1.1 server and the bounds it applies at the socket), `limits`
(the bounds as a plain value), `answers` (the edge's own answers and the
linger that ends a connection). Imports nothing of ours.
"""
