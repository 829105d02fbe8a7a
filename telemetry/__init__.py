"""ray-gitops telemetry: how spans leave a process, for every process that traces.

The agent (`gitops.process.tracing`), the proxies (`proxy.observability.tracing`) and the replicas
(`replica.tracing`) each trace their own work; what they share is here, so
it is written once. Imports nothing of ours.

- `otlp`: a span exporter to an OTLP/HTTP endpoint in batches, counting what
  each export sent or lost, and the W3C trace-context reader for a request's
  header list.
"""
