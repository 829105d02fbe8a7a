"""ray-gitops HTTP edge: bounds on slow, oversized and excess clients.

Shared by every HTTP server of ours (the proxy's public listener, the agent's
admin and webhook listeners), which otherwise import nothing of each other.
Imports nothing of ours; see `httpedge.bounds`. `httpedge.asgi` names the ASGI
types (scope, message, receive, send, app) once, for the proxy and the
replica's ASGI host too.
"""
