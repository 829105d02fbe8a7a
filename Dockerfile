# The ray-gitops agent: `gitops run` against a repository URL, with an
# embedded Ray (or `--ray-address` to join a cluster). docs/guides/operations.md
# has the details.
#
#   docker build -t ray-gitops .
#   docker run --rm --shm-size=2g -p 8000:8000 -p 127.0.0.1:8001:8001 -p 8003:8003 \
#     -e GITOPS_REPO=https://github.com/you/specs.git -v gitops-state:/state \
#     -v /etc/gitops:/secrets:ro -e GITOPS_ADMIN_TOKEN_FILE=/secrets/admin-token \
#     -e GITOPS_WEBHOOK_SECRET_FILE=/secrets/hook-secret ray-gitops
#
# Settings (environment, or extra flags after the image name, which win):
#   GITOPS_REPO                 repository URL (required): https://, ssh:// or file://
#   GITOPS_BRANCH               branch to watch (default: the remote's default branch)
#   GITOPS_PATH                 spec path in the repository (default: deployments)
#   GITOPS_ADMIN_TOKEN_FILE     bearer token of the admin API (required: it listens on 0.0.0.0)
#   GITOPS_ADMIN_ALLOWED_HOSTS  Host names the admin API answers besides loopback, comma-separated
#   GITOPS_WEBHOOK_SECRET_FILE  turns on POST /hooks/git, alone on port 8003 (mount the secret as a file)
# The state dir (history ledger, clone cache, code exports) is the /state volume.
# Ray keeps its object store in /dev/shm: give the container a big one
# (--shm-size), or Ray falls back to slower disk-backed memory.
# Inside the container the proxy (8000), its metrics (8002), the admin API
# (8001) and the webhook (8003) listen on all interfaces so they can be
# published. The admin API needs the token on every path but /metrics and
# /healthz; still publish 8001 on loopback or a private network only, and put
# TLS in front of 8000/8003 (docs/guides/security.md).

# Stage 1: the wheel, built as `python -m build` builds it for PyPI.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY gitops ./gitops
COPY controller ./controller
COPY proxy ./proxy
COPY replica ./replica
COPY vocabulary ./vocabulary
COPY httpedge ./httpedge
COPY datalink ./datalink
COPY telemetry ./telemetry
COPY ray_gitops ./ray_gitops
COPY hardening ./hardening
# The apps of `gitops init --example` (gitops/commands/init-examples/*/deployments/apps/ link to them).
COPY deployments/apps ./deployments/apps
RUN pip wheel --no-cache-dir --disable-pip-version-check --no-deps --wheel-dir /dist .

# Stage 2: the wheel installed into a virtualenv, without compilers or sources.
FROM python:3.11-slim
# git for fetching (gitpython drives the git binary), ssh for ssh:// URLs,
# tini so Ctrl-C / SIGTERM reach the agent, which then stops Ray cleanly.
# Debian's stable packages get security fixes under the same version, so
# they are not pinned.
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends git openssh-client ca-certificates tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 gitops \
 && useradd --create-home --uid 10001 --gid 10001 gitops \
 && mkdir /state && chown gitops:gitops /state && chmod 0700 /state
COPY --from=build /dist /dist
RUN python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check /dist/*.whl \
 && rm -rf /dist
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    GITOPS_PATH=deployments
USER 10001:10001
WORKDIR /home/gitops
VOLUME ["/state"]
EXPOSE 8000 8001 8002 8003
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s \
  CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8001/healthz', timeout=4)"]
ENTRYPOINT ["/usr/bin/tini", "--", "/bin/sh", "-c", "\
: \"${GITOPS_REPO:?set GITOPS_REPO to the repository URL}\"; \
: \"${GITOPS_ADMIN_TOKEN_FILE:?set GITOPS_ADMIN_TOKEN_FILE to the admin token file}\"; \
exec gitops run --repo \"$GITOPS_REPO\" --path \"$GITOPS_PATH\" --state-dir /state \
  --proxy-host 0.0.0.0 --admin-host 0.0.0.0 --admin-token-file \"$GITOPS_ADMIN_TOKEN_FILE\" \
  ${GITOPS_ADMIN_ALLOWED_HOSTS:+--admin-allowed-hosts \"$GITOPS_ADMIN_ALLOWED_HOSTS\"} \
  ${GITOPS_BRANCH:+--branch \"$GITOPS_BRANCH\"} \
  ${GITOPS_WEBHOOK_SECRET_FILE:+--webhook-secret-file \"$GITOPS_WEBHOOK_SECRET_FILE\" --webhook-host 0.0.0.0 --webhook-port 8003} \
  \"$@\"", "gitops"]
