"""What a replica is given and what it says, as values.

- `serving`: what user code in a replica meets (`ray_gitops.serving`): its
  context, handles to other backends and endpoints, their errors.
- `replica_env`: what an embedded Ray's processes, replicas included,
  inherit of the agent's environment (an allow-list, never `GITOPS_*`), for
  `--replica-env` and the cluster starter alike.
- `replica_output`: a replica's own stdout and stderr lines, as `gitops logs`
  reads them.
- `model_digests`: a model's digest (a file's sha256, a directory's
  manifest) and the sources a `[models.NAME]` table may name;
  `hub_sources`: an hf://ORG/NAME@COMMIT source, the files its
  include/exclude globs select, and the Hub's HTTP API as values;
  `oci_sources`: an oci://REGISTRY/REPO@sha256:… source, the manifest that
  holds its model (a modelcar's /models, an artifact's files), the tar
  members a layer may hold, and the distribution API as values;
  `s3_picks`: which file or directory under an S3 prefix `gitops models
  resolve` pins (newest, highest version, `--match`), and the lines it prints;
  `oci_tags`: which tag of an OCI repository artifact automation follows
  (the highest semantic version, narrowed by a regex), and the tag list's pages;
  `model_stats`: what a node's model cache did, in the file its replicas
  write and its proxies read; `token_counts`: an OpenAI backend's token
  metrics per model, in another such file.
- `secret_forms`: the forms a secret value takes in text (repr, base64,
  percent-encoding ...), for the agent's and the replica's redaction.
"""
