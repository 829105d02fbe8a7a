"""`gitops run`: the agent process — Ray, controller, reconcile loop, admin API.

Owns the process's lifetime: check the flags (bad ones are one-line
errors before anything starts), register the secrets it was given for
redaction and take them out of its own command line, lock the state dir,
start or join Ray quietly in `--namespace` (an embedded Ray with only the
allow-listed part of this process's environment, `--replica-env` adding
names: `vocabulary.replicas.replica_env`; on the ports `--ray-port` and
`--ray-min/max-worker-port` ask: `gitops.process.ray_ports`), start or find the controller
(which starts the proxies) and claim it as its one agent (refused with one
line when another agent owns it, unless `--take-over`; stopped when taken
over), wait for the proxies (one that cannot start, e.g. its port in use, is
a one-line error: `gitops.process.proxy_start`) and give it this start's
`--prometheus-url`, run the agent, its artifact automation (`automation.toml`,
`gitops.commands.automation`, off the apply path) and the admin server on one event loop,
write the admin URL in the state dir for client commands
(`gitops.admin.address`), say `gitops: ready` (and write `--ready-file`) once
the first reconcile is over, and on Ctrl-C / SIGTERM stop all of it cleanly:
an embedded Ray is shut down with everything it ran, a joined cluster
keeps serving. Every event of the process goes to stdout through logging
(`--log-format text|json`, see `gitops.process.logs`). Must not: contain reconcile
logic (that is `gitops.loop.agent`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from gitops.admin import address as agent_address
from gitops.process import ray_versions
from gitops.loop import statedir
from gitops.errors import UsageError, UserError
from gitops.process.logs import configure_logging
from gitops.process.quieting import quiet_ray_output
from gitops.process.supervising import CHILD_ENV, supervise, watch_ray
from vocabulary.control.proxy_workers import NODE_IP

if TYPE_CHECKING:
    from controller.client import ControllerClient
    from gitops.sources.repos import GitSource
    from vocabulary.control.ownership import Owner
    from gitops.sources.signing import SigningKey
    from gitops.sources.verifying import CommitVerifier
    from gitops.loop.metrics import AgentMetrics
    from gitops.notifications.config import Channel
    from gitops.notifications.delivering import HttpSender, Notifier
    from gitops.notifications.links import Links
    from gitops.admin.webhooks import DeliveryLog
    from gitops.process.tracing import OtlpTraceSink
    from gitops.process.ray_ports import RayPorts

__all__ = ["run_command", "join_ray", "take_charge", "bind_socket", "start_logging", "otlp_endpoint"]

_LOG = logging.getLogger("gitops.run")
_NOTIFY_DRAIN_S = 5.0  # at stop, how long queued notifications may still take
_PROXY_START_S = 60.0  # at start, how long the proxies may take before the agent goes on without waiting


def run_command(args: argparse.Namespace) -> int:
    from gitops.admin.auth.access import read_token
    from gitops.sources.repos import GitSource
    from gitops.admin.webhooks import read_secret

    quiet_ray_output()
    secret = read_secret(args.webhook_secret_file) if args.webhook_secret_file else None
    token = read_token(args.admin_token_file, "--admin-token-file") if args.admin_token_file else None
    git_token = read_token(args.git_token_file, "--git-token-file").decode() if args.git_token_file else None
    promote = args.promote_token_file
    args.promote_token = read_token(promote, "--promote-token-file").decode() if promote else None
    if promote and not args.environment:
        raise UsageError("--promote-token-file promotes from an environment: give --environment too")
    automation = getattr(args, "automation_token_file", None)
    args.automation_token = read_token(automation, "--automation-token-file").decode() if automation else None
    _register_secrets(args.repo, token, secret, git_token, args.promote_token, args.automation_token)
    from gitops.commands.automation import registry_access

    args.automation_registry = registry_access(getattr(args, "automation_registry_token_file", None),
                                               "--automation-registry-token-file")
    _redact_command_line()
    args.signing = _signing_key(args)  # after the command line is shown: the key's path is masked from here on
    from gitops.loop.secrets import load_identities
    from hardening.core_dumps import no_core_dumps

    no_core_dumps()  # it holds tokens, and the secrets' values once decrypted

    load_identities(args.age_identity)  # a bad identity file stops run before anything starts
    if args.ray_address is not None and not os.environ.get(CHILD_ENV):
        # A driver dies with its cluster: a joined agent runs in a child that
        # is started again when Ray restarts (gitops.process.supervising).
        start_logging(args.log_format)
        return supervise(args.argv, args.ray_address)
    _check_exposure(args, token, secret)
    args.admin_tokens = _token_file(args.admin_tokens_file)
    args.oidc = _oidc_settings(args)
    _check_intervals(args)
    if args.max_replicas < 1:
        raise UsageError(f"--max-replicas must be at least 1, not {args.max_replicas}")
    _check_proxy_workers(args.proxy_workers)
    otlp_endpoint(args.otlp_endpoint, os.environ)  # a bad URL is refused before Ray starts
    _check_max_connections(args.proxy_max_connections)
    ports = _ray_ports(args)
    replica_env = _replica_env(args.replica_env or "")
    links = _links(args)
    channels = _notify_channels(args.notify, args.repo) if args.notify else ()
    _check_namespace(args.namespace)
    verifier = _verifier(args)
    state = statedir.prepare(Path(args.state_dir))
    state_lock = statedir.lock(state.root)  # held until this process exits
    source = GitSource(args.repo, args.branch, state.root, password=git_token, verifier=verifier,
                       fetch_timeout_s=args.fetch_timeout)
    source.discard_unfinished_exports()
    sockets = [bind_socket(args.admin_host, args.admin_port, "--admin-port")]
    _proxy_addresses_free(args)
    if args.webhook_port is not None:
        sockets.append(bind_socket(args.webhook_host, args.webhook_port, "--webhook-port"))
    start_logging(args.log_format)
    _LOG.info(
        f"gitops: watching {source.location} branch {source.branch} path {args.path}; "
        f"proxy http://{'<node ip>' if args.proxy_host == NODE_IP else args.proxy_host}:{args.proxy_port}, "
        f"admin http://{args.admin_host}:{args.admin_port}"
    )
    _warn_unlisted_signing_key(args)
    from controller.cluster import init_ray, kill_embedded_ray, mute_pushed_errors, ray_endpoints, shutdown_ray

    embedded = args.ray_address is None
    client = None
    ray_watch = threading.Event()  # replaced by the live watch once Ray is up
    _sigterm_interrupts()
    try:
        _LOG.info("gitops: starting Ray" if embedded else f"gitops: joining Ray at {args.ray_address}")
        try:
            join_ray(
                lambda: init_ray(args.ray_address, namespace=args.namespace, state_dir=state.root,
                                 replica_env=replica_env, gcs_port=ports.gcs,
                                 worker_ports=ports.workers),
                args.ray_address,
            )
        except ConnectionError as error:
            raise UserError(str(error)) from None
        mute_pushed_errors()
        _sigterm_interrupts()  # ray.init installed its own, which exits at once
        ray_watch = watch_ray(*ray_endpoints(), embedded=kill_embedded_ray if embedded else None)
        client = _controller(args, state.root if embedded else None)
        owner = take_charge(client, args, source, statedir.agent_id(state.root))
        _proxies_started(client, embedded, owner.agent_id)
        asyncio.run(_serve(args, state, source, client, owner.agent_id, secret, token, sockets, links, channels))
        if not embedded:
            _release_quietly(client, owner.agent_id)
    except (KeyboardInterrupt, SystemExit):
        pass  # Ctrl-C or SIGTERM during start-up: the same clean stop as later
    finally:
        _sigterm_interrupts()  # asyncio.run reset it to the default on exit
        ray_watch.set()  # stopping Ray from here on is on purpose
        for sock in sockets:
            sock.close()
        if embedded:
            # A joined cluster keeps serving without the agent; an embedded
            # one goes away with it, replicas and proxies drained first.
            _stop_quietly(client)
            shutdown_ray()
        state_lock.close()
    _LOG.info("gitops: stopped")
    return 0


def join_ray(start: Callable[[], None], address: str | None) -> None:
    """Start or join Ray; a cluster of another Ray or Python version is a one-line error."""
    try:
        start()
    except RuntimeError as error:
        line = ray_versions.mismatch_line(str(error))
        if line is None:
            raise
        raise UserError(f"--ray-address {address}: {line}") from None


def _register_secrets(repo: str, *secrets: bytes | str | None) -> None:
    """Every secret this process was given is masked wherever it would be shown;
    an ssh URL with a password is refused (ssh takes its secrets from a key)."""
    from gitops.redaction import SshPasswordError, register_secret, register_url_credentials, split_credentials

    # Both parts: a token alone in the URL (https://TOKEN@host) is its user name.
    register_url_credentials(repo)
    for secret in secrets:
        if secret:
            register_secret(secret)
    try:
        split_credentials(repo)
    except SshPasswordError as error:
        raise UsageError(f"--repo {error}") from None


def _redact_command_line() -> None:
    """`ps` shows this process's command line without the secrets it was given."""
    from gitops.process.proctitle import retitle
    from gitops.redaction import redact

    shown = [redact(arg) for arg in sys.orig_argv]
    if shown != sys.orig_argv and not retitle(shown):
        _LOG.warning("gitops: this system shows the --repo URL's credentials in `ps`; use --git-token-file")


def _sigterm_interrupts() -> None:
    """SIGTERM outside the event loop (Ray starting or stopping) stops cleanly
    too, like Ctrl-C, instead of killing the process and orphaning Ray."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _controller(args: argparse.Namespace, embedded_state: Path | None) -> ControllerClient:
    from controller.client import CheckpointError, start_or_connect

    options = {
        "proxy_metrics_port": args.proxy_metrics_port,
        "proxy_workers": args.proxy_workers,
        "otlp_endpoint": otlp_endpoint(args.otlp_endpoint, os.environ),
        "proxy_max_connections": args.proxy_max_connections,
        "proxy_grpc_port": args.grpc_port,
    }
    # Each node's model cache: the flag's, else inside the state dir when Ray is ours (docs/guides/models.md).
    cache_dir = args.model_cache_dir
    if cache_dir is None and embedded_state is not None:
        cache_dir = str((embedded_state / "models").resolve())
    options |= {"model_cache_dir": cache_dir, "model_cache_bytes": args.model_cache_size}
    try:
        return start_or_connect(
            namespace=args.namespace, proxy_host=args.proxy_host, proxy_port=args.proxy_port, options=options
        )
    except CheckpointError as error:
        raise UserError(str(error)) from None


def otlp_endpoint(flag: str | None, environ: Mapping[str, str]) -> str | None:
    """Where traces go: `--otlp-endpoint`, else `OTEL_EXPORTER_OTLP_ENDPOINT`, else nowhere (None)."""
    url = flag or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or None
    if url is None:
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        where = "--otlp-endpoint" if flag else "OTEL_EXPORTER_OTLP_ENDPOINT"
        raise UserError(f"{where}: {url!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:4318)")
    return url.rstrip("/")


def take_charge(client: ControllerClient, args: argparse.Namespace, source: GitSource, agent_id: str) -> Owner:
    """Become the namespace's one agent, then give the controller this start's
    `--prometheus-url`: one already running (a restarted agent, a joined
    cluster) must not keep an earlier agent's. Refused: the controller is untouched."""
    owner = _claim(client, args, source, agent_id)
    client.set_prometheus_url(args.prometheus_url)
    return owner


def _claim(client: ControllerClient, args: argparse.Namespace, source: GitSource, agent_id: str) -> Owner:
    """Become the namespace's one agent, or a one-line error naming the agent that is."""
    from vocabulary.control.ownership import Owner

    owner = Owner(
        agent_id=agent_id, repo=source.location, branch=source.branch, path=args.path,
        host=socket.gethostname(), pid=os.getpid(), started_at=time.time(),
    )
    holder = client.claim(owner, take_over=args.take_over)
    if holder is not None:
        raise UserError(
            f"Ray namespace '{args.namespace}' is reconciled by {holder.describe()}; "
            "stop that agent, use another --namespace, or pass --take-over"
        )
    if args.take_over:
        _LOG.warning(f"gitops: took Ray namespace '{args.namespace}' over as agent {agent_id}")
    return owner


async def _watch_ownership(
    client: ControllerClient, agent_id: str, namespace: str, interval_s: float, stop: asyncio.Event
) -> None:
    """Stop this agent once another one took its namespace over (`--take-over`)."""
    while not stop.is_set():
        await asyncio.sleep(interval_s)
        try:
            holder = await asyncio.to_thread(client.owner)
        except Exception:  # noqa: BLE001 — the controller restarting: ask again next time
            continue
        if holder is not None and holder.agent_id != agent_id:
            _LOG.error(f"gitops: Ray namespace '{namespace}' was taken over by {holder.describe()}; stopping")
            stop.set()


def _proxy_addresses_free(args: argparse.Namespace) -> None:
    from gitops.process.proxy_start import check_addresses_free

    if args.proxy_host == NODE_IP:
        return  # no address before Ray runs: a taken port fails the proxy's start, which says so
    ports = {"--proxy-port": args.proxy_port, "--proxy-metrics-port": args.proxy_metrics_port}
    if args.grpc_port is not None:
        ports["--grpc-port"] = args.grpc_port
    check_addresses_free(args.proxy_host, ports, joined=args.ray_address is not None)


def _proxies_started(client: ControllerClient, embedded: bool, agent_id: str) -> None:
    """Nothing is applied while no proxy can serve it: a proxy that cannot
    start (its address in use) stops the agent with one line (gitops.process.proxy_start)."""
    from gitops.process.proxy_start import status_of, wait_for_proxies

    try:
        wait_for_proxies(status_of(client), _PROXY_START_S)
    except UserError:
        if not embedded:
            _release_quietly(client, agent_id)
        raise


def _release_quietly(client: ControllerClient, agent_id: str) -> None:
    """A clean stop frees the namespace: the next agent needs no --take-over."""
    try:
        client.release(agent_id)
    except Exception as error:  # noqa: BLE001 — the cluster is gone; nothing to free
        _LOG.error(f"gitops: releasing the namespace: {type(error).__name__}: {error}")


def _stop_quietly(client: ControllerClient | None) -> None:
    if client is None:
        return
    try:
        client.shutdown()
    except Exception as error:  # noqa: BLE001 — Ray is stopped right after anyway
        _LOG.error(f"gitops: controller shutdown: {type(error).__name__}: {error}")


async def _serve(
    args: argparse.Namespace,
    state: statedir.StateDir,
    source: GitSource,
    client: ControllerClient,
    agent_id: str,
    secret: bytes | None,
    token: bytes | None,
    sockets: list[socket.socket],
    links: Links,
    channels: Sequence[Channel],
) -> None:
    from gitops.admin import api
    from gitops.reconcile import planner
    from gitops.admin.auth.access import AccessPolicy
    from gitops.loop.agent import Agent, AgentSettings, Trigger
    from gitops.loop.history import History
    from gitops.specs.limits import SpecLimits
    from gitops.specs.loading import Loader
    from gitops.loop.metrics import CONTENT_TYPE, AgentMetrics
    from gitops.admin.shadow_mismatches import collector, proxies_to_ask
    from gitops.admin.webhooks import RateLimiter

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)

    from gitops.loop.secrets import SecretDelivery, SecretsLoader, digest_key, load_identities
    from gitops.reconcile.apply_traces import TraceRing, trace_json

    metrics = AgentMetrics()
    loader = Loader(limits=SpecLimits(max_replicas=args.max_replicas), environment=args.environment)
    # Secrets are decrypted here, in the agent, and leave it sealed (gitops.loop.secrets).
    load = SecretsLoader(loader.load_tree, load_identities(args.age_identity), digest_key(state.root))
    sender, notifier = _notifier(channels, links, metrics, args.namespace)
    duties = None
    if args.environment:
        from gitops.commands.run_environment import build_duties

        duties = build_duties(args, source, client, args.promote_token)
    exported = _apply_traces(otlp_endpoint(args.otlp_endpoint, os.environ), metrics)
    traces = TraceRing(forward=exported)
    history = History(state.history)
    agent = Agent(
        source,
        SecretDelivery(client, load),
        history,
        load=load,
        plan=planner.plan,
        metrics=metrics,
        settings=AgentSettings(
            spec_path=args.path,
            interval_s=args.interval,
            resync_interval_s=args.resync_interval,
            suspend_marker=state.suspend_marker,
            auto_revert=args.auto_revert,
            quarantine_file=state.quarantine,
        ),
        notifier=notifier,
        duties=duties,
        traces=traces,
    )
    # Artifact automation (automation.toml): on its own timer, never in a tick (gitops.loop.automation).
    from gitops.commands.automation import build_loop

    automation = build_loop(source, args.path, args.environment, getattr(args, "automation_token", None),
                            tuple(args.promote_api_url or ()), history, metrics,
                            getattr(args, "automation_registry", None), getattr(args, "signing", None))
    guard = api.WebhookGuard(secret, RateLimiter(), deliveries=_delivery_log(state.webhook_deliveries)) if secret else None

    def webhook_fetch() -> None:
        agent.notify(Trigger.WEBHOOK)

    separate_webhook = len(sockets) > 1
    oidc = _oidc_verifier(args.oidc)
    app = api.build_app(
        agent,
        sync=lambda: agent.notify(Trigger.SYNC),
        webhook_fetch=webhook_fetch,
        metrics=lambda: (metrics.render(), CONTENT_TYPE),
        webhook=None if separate_webhook else guard,
        commit_url_template=links.commit_url_template,
        policy=AccessPolicy.build(token, args.admin_host, _hosts(args.admin_allowed_hosts),
                                  tokens=args.admin_tokens.table if args.admin_tokens else None,
                                  environment=args.environment, verifier=oidc,
                                  sessions=oidc.logins.session if oidc is not None and args.oidc.client_id else None),
        shadow_mismatches=collector(client.proxy_mismatches, lambda: proxies_to_ask(agent.observed())),
        replica_output=client.replica_output,
        override_window=(lambda who: agent.sync(override_window_by=who)) if duties else None,
        apply_traces=lambda commit: [trace_json(trace) for trace in traces.of_commit(commit)],
        audit=agent,
        sign_in=oidc if oidc is not None and args.oidc.client_id else None,
        pending_plan=agent.pending_plan,
        decide_rollout=lambda endpoint, verb, who: _decide_rollout(client, agent, endpoint, verb, who),
        ejections=agent.ejections,
        automation=automation.status,
    )
    servers = [api.server(app, args.admin_host, args.admin_port)]
    if separate_webhook and guard is not None:
        servers.append(api.server(api.build_webhook_app(guard, webhook_fetch), args.webhook_host, args.webhook_port))
    if agent.suspended:
        _LOG.warning("gitops: reconciliation is suspended (since before this start); `gitops resume` resumes it")
    admin_url = agent_address.connectable_url(args.admin_host, args.admin_port)
    agent_address.write(state.root, admin_url)
    reconciling = asyncio.create_task(agent.run())
    announcing = asyncio.create_task(_announce_ready(agent, args, admin_url))
    serving = [asyncio.create_task(server.serve(sockets=[sock])) for server, sock in zip(servers, sockets)]
    stopping = asyncio.create_task(stop.wait())
    watching = asyncio.create_task(_watch_ownership(client, agent_id, args.namespace, args.interval, stop))
    notifying = asyncio.create_task(notifier.run()) if notifier else None
    automating = asyncio.create_task(automation.run())
    await asyncio.wait([stopping, reconciling, *serving], return_when=asyncio.FIRST_COMPLETED)
    _LOG.info("gitops: stopping")
    # An apply cut short here is safe: the next run plans from the controller's state.
    reconciling.cancel()
    automating.cancel()
    stopping.cancel()
    watching.cancel()
    announcing.cancel()
    agent_address.remove(state.root)
    if args.ready_file:
        _remove_quietly(Path(args.ready_file))
    for server in servers:
        server.stop()
    await asyncio.gather(reconciling, *serving, stopping, watching, announcing, automating, return_exceptions=True)
    if notifying is not None and notifier is not None:
        await notifier.drain(_NOTIFY_DRAIN_S)  # e.g. the commit status of the last apply
        notifying.cancel()
        await asyncio.gather(notifying, return_exceptions=True)
    if sender is not None:
        await sender.aclose()
    if exported is not None:
        await asyncio.to_thread(exported.close)  # the last apply's trace goes out
    for task in (reconciling, *serving):
        if not task.cancelled() and task.exception() is not None:
            _LOG.error(f"gitops: {type(task.exception()).__name__}: {task.exception()}")


async def _decide_rollout(client: Any, agent: Any, endpoint: str, verb: str, who: str) -> str:
    """A running rollout promoted or aborted by hand at the controller; the agent then looks
    at once, so an abort's history row and --auto-revert come now, not at the next poll."""
    from gitops.loop.agent import Trigger

    message: str = await client.decide_rollout(endpoint, verb, who)
    agent.notify(Trigger.POLL)
    return message


async def _announce_ready(agent: Any, args: argparse.Namespace, admin_url: str) -> None:
    """Once the first reconcile is over (or at once when suspended): the log line
    `gitops: ready` and, with `--ready-file`, the admin URL written there."""
    if not agent.suspended:
        await agent.reconciled.wait()
    status = agent.status()
    proxy_host = args.proxy_host
    if proxy_host == NODE_IP:
        from controller.cluster import local_node_ip

        proxy_host = local_node_ip()
    _LOG.info(
        f"gitops: ready: {status.status.value}; proxy {agent_address.connectable_url(proxy_host, args.proxy_port)}"
        f", admin {admin_url}"
    )
    if args.ready_file:
        path = Path(args.ready_file)
        partial = path.with_name(path.name + ".partial")
        partial.write_text(admin_url + "\n", encoding="utf-8")
        os.replace(partial, path)


def _delivery_log(path: Path) -> DeliveryLog:
    """The webhook deliveries accepted so far, kept in the state dir (0600) so
    that a delivery replayed after a restart is refused too."""
    from gitops.admin.webhooks import DeliveryLog

    def store(keys: list[str]) -> None:
        temp = statedir.private_file(path.with_name(path.name + ".tmp"))
        temp.write_text("".join(key + "\n" for key in keys), encoding="utf-8")
        os.replace(temp, path)

    log = DeliveryLog(store=store)
    try:
        log.restore(path.read_text(encoding="utf-8").split())
    except FileNotFoundError:
        pass
    except (OSError, UnicodeDecodeError) as error:
        _LOG.warning("webhook deliveries in %s not read (%s): replays are refused from now on only", path, error)
    return log


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _apply_traces(endpoint: str | None, metrics: AgentMetrics) -> OtlpTraceSink | None:
    """Each applied commit's trace, sent to `endpoint` (None: not traced), counted in `metrics`."""
    if endpoint is None:
        return None
    from gitops.process.tracing import OtlpTraceSink

    return OtlpTraceSink(endpoint, sent=metrics.spans_sent)


def _links(args: argparse.Namespace) -> Links:
    from gitops.notifications.links import Links, check_commit_url_template, check_public_url

    try:
        return Links(
            public_url=check_public_url(args.public_url) if args.public_url else None,
            commit_url_template=(
                check_commit_url_template(args.commit_url_template) if args.commit_url_template else None
            ),
        )
    except ValueError as error:
        raise UserError(str(error)) from None


def _notify_channels(path: str, repo: str) -> tuple[Channel, ...]:
    """The `--notify` file's providers, their secret files read; every error located."""
    from gitops.notifications.config import NotifyFileError, parse_notify_file

    if Path(repo).is_dir() and Path(path).resolve().is_relative_to(Path(repo).resolve()):
        raise UserError(f"--notify {path}: keep it outside the watched repository {repo}; it holds secrets")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"--notify {path}: {getattr(error, 'strerror', None) or error}") from None
    try:
        return parse_notify_file(path, text, _read_secret_file)
    except NotifyFileError as error:
        raise UserError(f"--notify {path} is invalid:", tuple(error.errors)) from None


def _read_secret_file(path: str) -> str:
    from gitops.redaction import register_secret

    secret = Path(path).read_text(encoding="utf-8", errors="replace").strip()
    register_secret(secret)
    return secret


def _notifier(
    channels: Sequence[Channel], links: Links, metrics: AgentMetrics, namespace: str
) -> tuple[HttpSender | None, Notifier | None]:
    """The notifier and its HTTP sender, or (None, None) without `--notify`."""
    if not channels:
        return None, None
    from gitops.notifications.delivering import HttpSender, Notifier
    from gitops.notifications.formats import Context

    sender = HttpSender()
    notifier = Notifier(
        channels, Context(namespace, links), send=sender, on_result=metrics.notification_finished
    )
    return sender, notifier


def _check_intervals(args: argparse.Namespace) -> None:
    for flag, value in (
        ("--interval", args.interval), ("--resync-interval", args.resync_interval), ("--fetch-timeout", args.fetch_timeout),
    ):
        if value <= 0:
            raise UserError(f"{flag} must be a positive number of seconds, not {value:g}")


def _ray_ports(args: argparse.Namespace) -> RayPorts:
    """The embedded Ray's ports as the flags ask, checked, and the GCS port free on this host."""
    from gitops.process.port_holders import holder_of
    from gitops.process.ray_ports import ray_ports

    taken = {"--proxy-port": args.proxy_port, "--proxy-metrics-port": args.proxy_metrics_port,
             "--admin-port": args.admin_port}
    if args.webhook_port is not None:
        taken["--webhook-port"] = args.webhook_port
    if args.grpc_port is not None:
        taken["--grpc-port"] = args.grpc_port
    ports = ray_ports(args.ray_port, args.ray_min_worker_port, args.ray_max_worker_port,
                      joined=args.ray_address is not None, taken=taken)
    if ports.gcs is not None:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("0.0.0.0", ports.gcs))
            except OSError:
                raise UserError(
                    f"the embedded Ray cannot listen on port {ports.gcs}: {holder_of('0.0.0.0', ports.gcs)} "
                    "(use --ray-port)"
                ) from None
    return ports


def _check_proxy_workers(workers: int) -> None:
    from vocabulary.control.proxy_workers import DEFAULT_WORKERS_CAP, MAX_PROXY_WORKERS

    if not 0 <= workers <= MAX_PROXY_WORKERS:
        raise UsageError(
            f"--proxy-workers must be 1 to {MAX_PROXY_WORKERS} (or 0: the node's CPUs, at most {DEFAULT_WORKERS_CAP}), "
            f"not {workers}"
        )


def _check_max_connections(connections: int) -> None:
    from vocabulary.control.proxy_workers import MAX_CONNECTIONS_CEILING

    if not 1 <= connections <= MAX_CONNECTIONS_CEILING:
        raise UsageError(f"--proxy-max-connections must be 1 to {MAX_CONNECTIONS_CEILING}, not {connections}")


def _check_exposure(args: argparse.Namespace, token: bytes | None, secret: bytes | None) -> None:
    """Usage errors (exit 2) for listeners that would be open to the network unguarded."""
    from gitops.admin.auth.access import is_loopback

    if token is None and not args.admin_tokens_file and not args.oidc_issuer and not is_loopback(args.admin_host):
        raise UsageError(
            f"--admin-host {args.admin_host} is not loopback: give --admin-token-file, --admin-tokens-file "
            "or --oidc-issuer "
            "(the admin API can sync and suspend the agent)"
        )
    if args.webhook_port is not None and secret is None:
        raise UsageError("--webhook-port needs --webhook-secret-file (the webhook accepts only signed calls)")


def _oidc_settings(args: argparse.Namespace) -> Any:
    """The OIDC issuer's settings from the flags (`gitops.admin.auth.oidc.OidcSettings`), or None; usage errors first."""
    if not args.oidc_issuer:
        if args.oidc_audience or args.oidc_group_role or args.oidc_client_id:
            raise UsageError("--oidc-audience, --oidc-group-role and --oidc-client-id need --oidc-issuer")
        return None
    from gitops.admin.auth.oidc import OidcSettings, check_issuer_url, parse_group_roles

    if not args.oidc_audience:
        raise UsageError("--oidc-issuer needs --oidc-audience (the `aud` its tokens carry for this agent)")
    if not args.oidc_group_role:
        raise UsageError("--oidc-issuer needs at least one --oidc-group-role GROUP=ROLE")
    return OidcSettings(issuer=check_issuer_url(args.oidc_issuer), audience=args.oidc_audience,
                        group_roles=parse_group_roles(args.oidc_group_role), groups_claim=args.oidc_groups_claim,
                        client_id=args.oidc_client_id)


def _oidc_verifier(settings: Any) -> Any:
    if settings is None:
        return None
    from gitops.admin.auth.oidc import OidcVerifier

    return OidcVerifier(settings)


def _token_file(path: str | None) -> Any:
    """The named tokens' file (`gitops.admin.auth.tokens.TokenFile`), or None; a bad file stops run (FILE:LINE)."""
    if not path:
        return None
    from gitops.admin.auth.tokens import TokenFile

    return TokenFile(path)


def _signing_key(args: argparse.Namespace) -> SigningKey | None:
    """The checked `--signing-key` (a bad one stops run with one line naming the flag)."""
    from gitops.sources.signing import load_signing_key

    given = getattr(args, "signing_key", None)
    return load_signing_key(given, "--signing-key") if given else None


def _warn_unlisted_signing_key(args: argparse.Namespace) -> None:
    """With `--verify-commits`, one warning when `--allowed-signers` does not list the
    `--signing-key`: the agent would refuse the commits its own automation pushes."""
    from gitops.sources.signing import allowed_by

    key = getattr(args, "signing", None)
    if key is not None and args.verify_commits and not allowed_by(key, Path(args.allowed_signers)):
        _LOG.warning(
            "gitops: the --signing-key's public key is not in --allowed-signers: --verify-commits will refuse the "
            "commits artifact automation pushes (add the key to the file)"
        )


def _verifier(args: argparse.Namespace) -> CommitVerifier | None:
    from gitops.sources.verifying import CommitVerifier

    if args.allowed_signers and not args.verify_commits:
        raise UsageError("--allowed-signers needs --verify-commits")
    if not args.verify_commits:
        return None
    if not args.allowed_signers:
        raise UsageError("--verify-commits needs --allowed-signers FILE (who may sign commits)")
    return CommitVerifier(Path(args.allowed_signers))


def _check_namespace(namespace: str) -> None:
    if not namespace.strip() or any(not (ch.isalnum() or ch in "-_.") for ch in namespace):
        raise UsageError(f"--namespace {namespace!r}: use letters, digits, '-', '_' or '.'")


def _replica_env(value: str) -> list[str]:
    """`--replica-env` as names and PREFIX_* patterns; a bad one is a usage error."""
    from vocabulary.replicas.replica_env import check_patterns

    patterns = [pattern.strip() for pattern in value.split(",") if pattern.strip()]
    problems = check_patterns(patterns)
    if problems:
        raise UsageError(f"--replica-env: {problems[0]}")
    return patterns


def _hosts(value: str) -> list[str]:
    return [host for host in value.split(",") if host.strip()]


def bind_socket(host: str, port: int, flag: str) -> socket.socket:
    """Bind a listener first, so a busy port is a one-line error before Ray starts."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        listener = flag.removeprefix("--").removesuffix("-port")
        raise UserError(f"{listener} address {host}:{port}: {error.strerror} (use {flag})") from None
    sock.listen(128)
    sock.setblocking(False)
    return sock


def start_logging(log_format: str) -> None:
    """Every event of the process on stdout, one per line, in `log_format`.

    The agent's own events from INFO up; other libraries' (Ray's) only from
    WARNING, so the console shows what the agent does, not its plumbing.
    """
    configure_logging(log_format, level=logging.WARNING, stream=sys.stdout)
    logging.getLogger("gitops").setLevel(logging.INFO)
