"""What the proxy tells about its traffic: metrics, traces, capture records, shadow verdicts.

- `metrics`: the Prometheus recorder and the port it is scraped from;
- `model_metrics`: the node's model cache metrics, read from its stats file;
- `token_metrics`: the node's LLM token metrics per backend and model, read from the
  file its OpenAI backends' replicas write;
- `tracing`: head sampling and the request span, exported over OTLP;
- `capture`: sampled request/response records, a bounded queue and the writer thread,
  with `redacting` (what a record says, redacted: pure) and `capture_s3` (an `s3://`
  sink's batched objects, with obstore);
- `request_stats`: answers counted for rollout checks and the status;
- `shadow_compare`: shadow replies against the primary's (pure), and `node_mismatches`
  (a node's shadow mismatches, shared by its workers);
- `bodies`: a body as the pieces it came in (`BodyView`), the one interface capture,
  shadow comparison and tracing read it through, never joined past a bound (pure).
"""
