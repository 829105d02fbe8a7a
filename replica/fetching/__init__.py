"""Fetching a model's bytes from where it lives into the node's cache: one fetcher per source scheme.

- `sources`: `fetch(source, dest, deadline)`, dispatching by scheme; the
  errors (`FetchError`, `TooLarge`) and the progress (`FetchProgress`) every
  fetcher shares; file:// sources copied there.
- `store`: s3:// and http(s):// sources, with obstore.
- `hub`: hf:// sources, a Hugging Face Hub's HTTP API with httpx.
- `oci`: oci:// sources, a registry's distribution API with httpx.
- `hashing`: what a fetcher hashes as it writes (`FileDigests`, `StreamHash`,
  a tar layer's member spans), so the cache reads a cold fetch back only
  where nobody hashed it.

A fetcher is imported only when a model of its scheme is fetched, so a
replica that fetches none never loads its libraries. Nothing here verifies
a model's digest: the cache (`replica.models`) does. I/O shells.
"""
