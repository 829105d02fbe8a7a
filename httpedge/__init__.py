"""ray-gitops HTTP edge: the HTTP/1.1 server of every listener of ours, with its bounds.

Serves the proxy's public listener and the agent's admin and webhook
listeners alike, so each bound on slow, oversized and excess clients is
written once. Imports nothing of ours.

- `server`: a lean HTTP/1.1 server for one ASGI3 app (httptools), handing
  WebSockets to uvicorn's protocol; the bounds it applies at the socket.
- `limits`: the bounds of one listener, as a plain value (pure).
- `answers`: the edge's own answers (a status that ends the connection,
  and the linger that delivers it).
- `asgi`: the ASGI types (scope, message, receive, send, app), named once
  for the proxy and the replica's ASGI host too.
"""
