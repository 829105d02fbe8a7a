"""The `gitops models` verb and what it reads: the pin of a `[models.NAME]` table.

- `command`: `gitops models digest PATH|URL`, the digest a `[models.NAME]`
  table pins, and `gitops models resolve REF`, the pin of a moving
  reference (hf://, s3://, oci://); `command.models_command` is what `gitops.cli`
  dispatches to.
- `digests`: a model's digest from where it is (a local file or directory,
  s3:// and http(s):// sources, an S3 prefix's listing) and an hf://
  revision's commit and selection digest, with the Hub token.
- `oci`: an OCI tag's pin (the registry's manifest and the model's digest)
  and a repository's tags, with the registry's credentials.

`digests` and `oci` are also what `gitops validate` and artifact automation
(`gitops.commands.validate`, `gitops.commands.automation`) read moving
references with. Must not: import any other verb's module (they import
these), and `digests` and `oci` not `command` (a layers contract in
`pyproject.toml` keeps both).
"""
