"""ray-gitops HTTP edge: our HTTP/1.1 server and the bounds on slow,
oversized and excess clients, for every listener of ours.

The proxy's public listener runs `server`; the agent's admin and webhook
listeners run uvicorn with `bounds`; both read their limits from one
`limits.EdgeLimits` value. Imports nothing of ours.

- `server`: a lean HTTP/1.1 server for one ASGI3 app (httptools), handing
  WebSockets to uvicorn's protocol.
- `bounds`: the same bounds on uvicorn's protocol, for the admin server.
- `limits`: the bounds of one listener, as a plain value (pure).
- `answers`: the edge's own answers (a status that ends the connection,
  and the linger that delivers it).
"""
