"""``kiwifs serve`` (REST, MCP at /mcp, the web interface) and ``kiwifs mcp`` (stdio or HTTP):
the long-running commands, and the listening socket they bind before saying they serve.

The servers (FastAPI, uvicorn, the mcp SDK) are imported inside the commands: together they take
about a second to import, which every `kiwifs memory report` would otherwise pay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from kiwifs import __version__
from kiwifs.base.heap import limit_arenas
from kiwifs.cli.common import ROOT_HELP, handed_tuning, root_option
from kiwifs.config import CONFIG_RELPATH, DEFAULT_MCP_PORT, DEFAULT_SERVE_PORT, load_config
from kiwifs.errors import CannotListen, KiwiError
from kiwifs.knowledge import Knowledge
from kiwifs.server.lifecycle import Serving

if TYPE_CHECKING:
    import socket

    from kiwifs.server.replica import Role


@click.command()
@root_option()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    "-p",
    type=click.IntRange(0, 65535),
    default=None,
    help="Port (default: config, else 3333; 0: any free port, printed at start).",
)
@click.option(
    "--api-key",
    envvar="KIWIFS_API_KEY",
    default=None,
    help="Require 'Authorization: Bearer KEY' (also KIWIFS_API_KEY or [auth] in config).",
)
@click.option(
    "--async-commit/--sync-commit",
    default=None,
    help="Commit in background batches (a write returns once on disk and journaled) "
    "instead of before returning. Default: [versioning] async_commit, else sync.",
)
@click.option(
    "--batch-window", type=click.IntRange(1, 60_000), default=None, help="Async batch window, ms."
)
@click.option(
    "--batch-max-size", type=click.IntRange(1, 100_000), default=None, help="Paths per batch."
)
@click.option(
    "--replica-of",
    default=None,
    metavar="URL",
    help="Follow the kiwifs server at URL (http://host:port): clone it into an empty root, "
    "serve reads here, forward writes to it. Remembered for later starts.",
)
@click.option(
    "--replica-key",
    default=None,
    help="The key this replica sends to its primary (default: --api-key, or the one remembered).",
)
def serve(
    root: str,
    host: str,
    port: int | None,
    api_key: str | None,
    async_commit: bool | None,
    batch_window: int | None,
    batch_max_size: int | None,
    replica_of: str | None,
    replica_key: str | None,
) -> None:
    """Serve the REST API, MCP at /mcp and the web interface at / for a knowledge root."""
    import uvicorn

    from kiwifs.rest.headertimeout import protocol_with
    from kiwifs.rest.probes import Probes
    from kiwifs.rest.starting import StartingApp  # FastAPI and the routes load once it listens
    from kiwifs.rest.stopping import SHUTDOWN_GRACE, StoppingServer
    from kiwifs.server.auth import LOOPBACK_HOSTS
    from kiwifs.server.spaces import SpaceRegistry

    limit_arenas()  # before the server's threads: see kiwifs.base.heap
    role = replica_role(root, replica_of, replica_key or api_key)
    kb = Knowledge.open(root, sweep=True, tuning=handed_tuning())
    serving = Serving(kb)
    serving.lock_root()
    if role.replica:
        serving.follow(role)
    from kiwifs.server.access import Gate

    # a key asked for but not given, a bad scoped key: no start
    gate = Gate.of(kb.config, kb.root, api_key or None)
    reload_on_hangup(gate)
    spaces = SpaceRegistry(kb)  # reads the spaces' list, opens none of them
    wanted = port if port is not None else kb.config.server.port or DEFAULT_SERVE_PORT
    sock = listen_socket(host, wanted)
    bind_port = sock.getsockname()[1]  # port 0: the one the system chose
    serving.prepare()
    versioning = kb.config.versioning
    if async_commit if async_commit is not None else versioning.async_commit:
        window = (batch_window or versioning.batch_window_ms) / 1000
        serving.enable_async_commit(window, batch_max_size or versioning.batch_max_size)

    def build(probes: Probes) -> Any:
        from kiwifs.mcp.lazy import lazy_mount_mcp  # the MCP SDK itself loads later still
        from kiwifs.rest.spaces import create_spaces_app

        # the commit process imports pygit2 while the routes are built, once /health answers
        serving.start_commit_process()
        return create_spaces_app(
            kb,
            spaces,
            mounts=lambda space_kb: lazy_mount_mcp(space_kb, host),
            gate=gate,
            host=host,
            probes=probes,
            serving=serving,
        )

    def stop() -> None:
        server.should_exit = True

    app = StartingApp(kb, build, loopback=host in LOOPBACK_HOSTS, on_failure=stop)
    click.echo(f"kiwifs {__version__} serving {kb.root} on http://{host}:{bind_port}", err=True)
    # no WebSocket route exists: "none" also spares importing a WebSocket library; requests
    # still running SHUTDOWN_GRACE seconds after SIGTERM/SIGINT are cancelled; a client that
    # never finishes its headers is closed (HeaderTimeoutProtocol: uvicorn has no such limit)
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan="on",
        ws="none",
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
        http=protocol_with(kb.tuning.header_timeout),
    )
    server = StoppingServer(config, kb.events, on_exit=spaces.end_streams)
    server.run(sockets=[sock])
    if app.error:
        raise KiwiError(app.error)


def replica_role(root: str, replica_of: str | None, key: str | None) -> Role:
    """This node's role for ``root``: a replica of ``replica_of`` (the root cloned from it
    when missing or empty), else the role a former start recorded, else the primary."""
    from pathlib import Path

    from kiwifs.server.replica import Role, check_primary_url, load_role, prepare_replica

    path = Path(root)
    role = load_role(path)
    if replica_of is None and not role.replica and (path / CONFIG_RELPATH).is_file():
        configured = load_config(path).replication  # [replication] primary, key
        if configured.primary.strip():
            replica_of, key = configured.primary, configured.key or key
    if replica_of is not None:
        role = Role(check_primary_url(replica_of), key or role.key, role.branch)
    if role.replica:
        prepare_replica(path, role)
        role = load_role(path)
    return role


def reload_on_hangup(gate: Any) -> None:
    """SIGHUP reads the scoped keys again (``kiwifs token create`` and config edits take effect
    without a restart). Read in a thread, not in the handler, which interrupts the event loop;
    a reload that fails keeps the keys in force and says why on stderr."""
    import signal
    import threading

    if not gate.scoped or not hasattr(signal, "SIGHUP"):
        return

    def reload() -> None:
        try:
            count = gate.reload()
        except Exception as exc:  # noqa: BLE001 - reported; the keys in force stay
            why = exc.message if isinstance(exc, KiwiError) else str(exc)
            click.echo(f"error: keys not reloaded, the old ones stay: {why}", err=True)
            return
        click.echo(f"kiwifs: {count} scoped keys loaded", err=True)

    signal.signal(signal.SIGHUP, lambda *_: threading.Thread(target=reload, daemon=True).start())


def listen_socket(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound before anything says "serving".

    A port in use (or an address that is not ours) is one ``error:`` line and exit 2, instead of
    a start-up banner followed by the server's own traceback.
    """
    import socket  # the servers' alone: ~2 ms every other command would pay

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    except (OverflowError, UnicodeError) as exc:
        sock.close()
        raise CannotListen(f"cannot listen on {host}:{port}: {exc}") from None
    sock.set_inheritable(True)
    return sock


REMOTE_UNSUPPORTED = (
    "kiwifs serves MCP in-process, next to the files: run 'kiwifs mcp --root DIR' on the "
    "machine that holds the knowledge root, or point the MCP host at the /mcp endpoint of "
    "'kiwifs serve' (http://HOST:3333/mcp); --remote and --api-key are KiwiFS remote "
    "mode, which kiwifs does not have"
)


@click.command()
@click.option("--root", "-r", default=None, type=click.Path(), help=ROOT_HELP + " (required)")
@click.option(
    "--remote", default=None, help="KiwiFS remote mode: not supported (the error says what to do)."
)
@click.option(
    "--space",
    default=None,
    help="Serve this space of the root's server (its [[spaces]] or one made at run time).",
)
@click.option("--api-key", default=None, hidden=True, help="KiwiFS remote mode (not supported).")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help=f"HTTP port (only with --http; default {DEFAULT_MCP_PORT}; 0: any free port).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP address to bind.")
def mcp(
    root: str | None,
    remote: str | None,
    space: str | None,
    api_key: str | None,
    use_http: bool,
    port: int | None,
    host: str,
) -> None:
    """Serve the MCP tools for a knowledge root (stdio by default)."""
    if remote is not None or api_key is not None:
        raise click.UsageError(REMOTE_UNSUPPORTED)
    if root is None:
        raise click.UsageError("Missing option '--root' / '-r'.")
    if port is not None and not use_http:
        raise click.UsageError("--port requires --http")
    if host != "127.0.0.1" and not use_http:
        raise click.UsageError("--host requires --http")
    from kiwifs.mcp.server import run_http, run_stdio

    if space is not None:
        from pathlib import Path

        from kiwifs.server.spaces import space_root

        root = str(space_root(Path(root), space))  # unknown: exit 2, "unknown space: NAME"
    limit_arenas()  # before the server's threads: see kiwifs.base.heap
    kb = Knowledge.open(root, sweep=True, tuning=handed_tuning())
    if use_http:
        from kiwifs.mcp.server import standalone_key

        standalone_key(kb)  # an auth setup it cannot enforce: no start (before binding)
    wanted = port if port is not None else DEFAULT_MCP_PORT
    sock = listen_socket(host, wanted) if use_http else None
    Serving(kb).prepare(background=False)  # the import made before the first answer
    if sock is not None:
        from kiwifs.rest.headertimeout import protocol_with

        # a client that never finishes its headers is closed (uvicorn has no such limit)
        run_http(kb, sock, protocol_with(kb.tuning.header_timeout))
    else:
        run_stdio(kb)
