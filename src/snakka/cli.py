"""The ``snakka`` command line: ``serve`` the broker, and small admin verbs.

    snakka serve [-c server.properties] [-o key=value ...] [--strict-durability]
    snakka topics create|list|describe|delete ...   (-b/--bootstrap-server, default localhost:9092)
    snakka groups list|describe|delete|reset-offsets|configs ...   (consumer and share groups)
    snakka transactions list|describe|describe-producers|abort|find-hanging ...
    snakka produce TOPIC < lines
    snakka consume TOPIC [--from-beginning] [--max-messages N] [--group G]
    snakka pipeline demo|generate|stream|check

``serve`` takes Kafka's config names (a server.properties file and/or ``-o`` overrides). The
admin verbs speak the Kafka protocol through snakka.client, so they work against any Kafka broker.
Heavy imports (rich, the client) happen inside the verbs so ``serve`` starts fast.

Errors a user can cause (a missing topic, an unreachable broker, a port in use, a locked data
dir, a missing extra) are one line on stderr and a non-zero exit, never a traceback: every verb
runs under :class:`_CleanErrors`, which also turns an unexpected exception into one line
(``SNAKKA_DEBUG=1`` shows its traceback). Tables are drawn with rich on a terminal and printed as
tab-separated lines (header first) when stdout is piped, so nothing is truncated.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import signal
import sys
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from collections.abc import Callable

DEFAULT_BOOTSTRAP = "localhost:9092"
# consume: how long to wait for a record before exiting when reading history (--from-beginning
# or --offset) without -n; kafka-console-consumer's --timeout-ms, given a default here because
# "print the topic" is what a reader of history wants.
DEFAULT_CONSUME_TIMEOUT_MS = 5000
SPARK_EXTRA_HINT = "pip install 'snakka[spark]'"


class _CleanErrors(click.Group):
    """A click group whose verbs fail with one line, never a traceback (SNAKKA_DEBUG=1 keeps
    the traceback of an unexpected exception for debugging)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort,
                KeyboardInterrupt, SystemExit):
            raise
        except Exception as e:
            if os.environ.get("SNAKKA_DEBUG"):
                raise
            raise click.ClickException(
                f"{type(e).__name__}: {e} (SNAKKA_DEBUG=1 shows the traceback)") from None


def _print_table(headers: list[str], rows: list[list[str]]) -> None:
    """A table: rich on a terminal; tab-separated lines (header first) when piped, so scripts
    and narrow pipes never see truncated cells."""
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*headers)
        for r in rows:
            table.add_row(*r)
        Console().print(table)
        return
    for r in [headers, *rows]:
        click.echo("\t".join(r))


# -- progress displays ---------------------------------------------------------------------
# Long verbs (produce, consume -n, pipeline generate, groups reset-offsets) show a rich progress
# bar on stderr, and only when stderr is a terminal and --quiet is not given: pipes, files and
# CI logs get no bars and no control characters. Records still go to stdout.
_QUIET = click.option("-q", "--quiet", is_flag=True,
                      help="No progress display (none is shown unless stderr is a terminal).")


def _progress_console() -> Any:
    """The rich console progress goes to (stderr), or None when stderr is not a terminal."""
    if not sys.stderr.isatty():
        return None
    from rich.console import Console

    return Console(stderr=True)


@contextlib.contextmanager
def _progress(description: str, total: int | None, *, quiet: bool, unit: str = "records"):
    """Yield ``update(done)`` (the running count) that drives a bar of ``total`` steps, or does
    nothing (quiet, no terminal, no known total). The bar disappears when the work ends; the
    verb's summary line follows it."""
    console = None if quiet or not total else _progress_console()
    if console is None:
        yield lambda done: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn(unit), TimeElapsedColumn(), TimeRemainingColumn(),
                  console=console, transient=True,
                  # Records printed to a terminal scroll above the bar; to a pipe, untouched.
                  redirect_stdout=sys.stdout.isatty(), redirect_stderr=False) as progress:
        task = progress.add_task(description, total=total)
        yield lambda done: progress.update(task, completed=done)


@contextlib.contextmanager
def _status(message: str, *, quiet: bool):
    """A spinner on stderr while work of unknown length runs (same rules as _progress)."""
    console = None if quiet else _progress_console()
    if console is None:
        yield
        return
    with console.status(message):
        yield


def _setup_logging(level: str, log_format: str = "text") -> None:
    """Logs on stderr: ``text`` (one human line per record) or ``json`` (one JSON object per
    line: util/jsonlog.py)."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from snakka.util.jsonlog import JsonFormatter

        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])


# ``snakka serve``'s metrics endpoint unless metrics.port is set (the JMX exporter's usual port
# for Kafka; docs/metrics.md). A busy default port falls back to an ephemeral one.
DEFAULT_METRICS_PORT = 9404
# ``snakka serve``'s web console unless console.port is set (docs/console.md; Confluent Control
# Center's port). A busy default port falls back to an ephemeral one, as the metrics'.
DEFAULT_CONSOLE_PORT = 9021


@click.group(cls=_CleanErrors)
@click.version_option(package_name="snakka")
def main() -> None:
    """snakka: a Kafka-compatible event-streaming broker."""


# -- serve ---------------------------------------------------------------------------------
@main.command()
@click.option("-c", "--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="A server.properties file (Kafka config names).")
@click.option("-o", "--override", multiple=True, metavar="KEY=VALUE",
              help="Set a config, e.g. -o num.partitions=3 (repeatable; wins over the file).")
@click.option("--listeners", help="Shortcut for -o listeners=... (default PLAINTEXT://localhost:9092).")
@click.option("--data-dir", help="Shortcut for -o log.dirs=... (default ./snakka-data).")
@click.option("--strict-durability", is_flag=True,
              help="Answer acks=all writes only after fsync (log.flush.strict=true).")
@click.option("--console-port", type=click.IntRange(-1, 65535), default=None,
              help="Shortcut for -o console.port=N: the web console's port (default 9021; "
                   "-1 off, 0 ephemeral).")
@click.option("--log-level", default="INFO", show_default=True)
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, envvar="SNAKKA_LOG_FORMAT",
              help="Log lines as text, or one JSON object per line (env SNAKKA_LOG_FORMAT).")
@click.option("--ready-line", is_flag=True, hidden=True,
              help="Print 'SNAKKA_READY port=N' on stdout when listening (used by snakka.testing); "
                   "'SNAKKA_METRICS port=N' before it when metrics are served.")
def serve(config_file, override, listeners, data_dir, strict_durability, console_port,
          log_level, log_format, ready_line) -> None:
    """Run the broker until SIGINT/SIGTERM. Prometheus metrics are served at
    http://localhost:9404/metrics unless metrics.port says otherwise (-1: off), the web
    console at http://localhost:9021/ unless console.port says otherwise."""
    import gc

    # No garbage collection during start-up (imports, loading thousands of partitions: the
    # objects made are kept, collections would only re-scan them); _serve freezes what
    # start-up made and turns collection back on.
    gc.disable()
    from snakka.config import BrokerConfig, ConfigError

    _setup_logging(log_level, log_format)
    extra: dict[str, str] = {}
    for item in override:
        if "=" not in item:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--override")
        k, v = item.split("=", 1)
        extra[k.strip()] = v.strip()
    if listeners:
        extra["listeners"] = listeners
    if data_dir:
        extra["log.dirs"] = data_dir
    if strict_durability:
        extra["log.flush.strict"] = "true"
    if console_port is not None:
        extra["console.port"] = str(console_port)
    text = open(config_file).read() if config_file else ""
    try:
        cfg = BrokerConfig.from_properties(text, extra)
        metrics_default = "metrics.port" not in cfg.overrides
        console_default = "console.port" not in cfg.overrides
        defaults = {**({"metrics.port": str(DEFAULT_METRICS_PORT)} if metrics_default else {}),
                    **({"console.port": str(DEFAULT_CONSOLE_PORT)} if console_default else {})}
        if defaults:
            cfg = BrokerConfig.from_properties(text, {**extra, **defaults})
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    for k in cfg.unknown_keys():
        logging.getLogger("snakka").warning("unknown config %s ignored", k)
    for k in cfg.unapplied_listener_keys():
        logging.getLogger("snakka").warning(
            "config %s ignored: snakka does not apply %s per listener (the broker-wide value "
            "is in force)", k, k.split(".", 3)[3])
    runner: Callable[..., Any]
    try:
        import uvloop
        runner = uvloop.run
    except ImportError:  # pragma: no cover
        runner = asyncio.run
    from snakka.storage.manager import LogDirError

    try:
        runner(_serve(cfg, ready_line, metrics_default, console_default))
    except OSError as e:
        # e.g. "listener PLAINTEXT://localhost:9092: cannot bind 127.0.0.1:9092: Address
        # already in use" (the listener names the address), or a log dir that cannot be used.
        what = e.strerror or str(e)
        if e.filename:
            what += f": {e.filename}"
        raise click.ClickException(f"cannot start: {what}") from None
    except (LogDirError, RuntimeError, ValueError) as e:  # locked dir, meta.properties, ...
        raise click.ClickException(f"cannot start: {e}") from None


async def _serve(cfg, ready_line: bool, metrics_default: bool = False,
                 console_default: bool = False) -> None:
    from snakka.broker import Broker

    broker = Broker(cfg, metrics_port_fallback=metrics_default,
                    console_port_fallback=console_default)
    try:
        await broker.start()
    finally:
        # What start-up made lives as long as the process: frozen, later collections never
        # re-scan it (serve() disabled collection until here).
        import gc

        gc.freeze()
        gc.enable()
    # (the broker logs where its metrics are: "Prometheus metrics at http://...")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if ready_line:
        if broker.metrics_server is not None:  # before the ready line: it is read first
            print(f"SNAKKA_METRICS port={broker.metrics_server.port}", flush=True)
        print(f"SNAKKA_READY port={broker.bound_port}", flush=True)
        if broker.console is not None:  # after the ready line: readers stop at that one
            print(f"SNAKKA_CONSOLE port={broker.console.port}", flush=True)
    if broker.console is not None:  # the URL to open, on stdout (log lines may be filtered)
        print(f"snakka web console: {broker.console.url}", flush=True)
    await stop.wait()
    await broker.stop()


# -- admin verbs ---------------------------------------------------------------------------
def _check_bootstrap(ctx, param, value: str | None) -> str | None:
    if value is None:
        return value
    from snakka.client.connection import parse_bootstrap

    try:
        _, port = parse_bootstrap(value)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise click.BadParameter(f"expected HOST:PORT (e.g. localhost:9092), got {value!r}")
    return value


_bootstrap_option = click.option(
    "-b", "--bootstrap-server", "bootstrap", default=DEFAULT_BOOTSTRAP, show_default=True,
    envvar="SNAKKA_BOOTSTRAP", callback=_check_bootstrap,
    help="The broker to talk to (env SNAKKA_BOOTSTRAP).")


# Client configs (security.protocol, ssl.*, sasl.*): Kafka's tools take a properties file with
# --command-config; kcat takes -X key=value. Every verb that talks to a broker takes both
# (through @_bootstrap); they are kept in the click context (the verbs' signatures stay as
# they are) and read by _client_config(), which checks them once (TLS context, SASL config)
# so a bad file or value is one line naming it. -X wins over the file. The one client config
# drives TLS and SASL alike (snakka.client.connection.KafkaConnection).
_CONFIG_NAME = re.compile(r"[A-Za-z][\w.\-]*")


def _store_command_config(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if not value:
        return
    from snakka.config import parse_properties

    try:
        with open(value, encoding="utf-8") as f:
            props = parse_properties(f.read())
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise click.ClickException(f"--command-config {value}: cannot read it: {reason}") \
            from None
    # A line without a separator parses as a key with no value; a config name has dots.
    bad = [k for k, v in props.items()
           if not _CONFIG_NAME.fullmatch(k) or (v == "" and "." not in k)]
    if bad:
        raise click.ClickException(f"--command-config {value}: not a properties file "
                                   f"(expected key=value lines, got {bad[0][:40]!r})")
    ctx.meta["snakka.client_config_path"] = value
    ctx.meta.setdefault("snakka.client_config_file", {}).update(props)


def _store_client_props(ctx: click.Context, param: click.Parameter,
                        value: tuple[str, ...]) -> None:
    if value:
        ctx.meta.setdefault("snakka.client_config_x", {}).update(_kv(value, "-X"))


def _client_config() -> dict[str, str]:
    """The verb's client configs (--command-config, then -X), checked: a config our client
    cannot use (an unknown security.protocol or sasl.mechanism, an unreadable trust store, a
    malformed sasl.jaas.config) is one error line naming it."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return {}
    cfg = {**ctx.meta.get("snakka.client_config_file", {}),
           **ctx.meta.get("snakka.client_config_x", {})}
    if cfg:
        from snakka.client.connection import client_ssl_context
        from snakka.client.sasl import SaslClientConfig

        try:
            client_ssl_context(cfg)
            SaslClientConfig.from_config(cfg)
        except ValueError as e:
            path = ctx.meta.get("snakka.client_config_path")
            where = f"--command-config {path} / -X" if path else "-X"
            raise click.ClickException(f"invalid client config ({where}): {e}") from None
    return cfg


def _bootstrap(f: Callable[..., Any]) -> Callable[..., Any]:
    """-b/--bootstrap-server, --command-config FILE and -X key=value (client configs)."""
    f = click.option("-X", "client_props", multiple=True, metavar="KEY=VALUE",
                     expose_value=False, callback=_store_client_props,
                     help="A client config, e.g. -X security.protocol=SASL_SSL -X "
                          "ssl.ca.location=ca.pem -X sasl.mechanism=SCRAM-SHA-512 "
                          "(repeatable; wins over --command-config).")(f)
    f = click.option("--command-config", metavar="FILE", expose_value=False,
                     callback=_store_command_config,
                     help="A properties file of client configs (security.protocol, ssl.*, "
                          "sasl.mechanism, sasl.jaas.config or sasl.username/sasl.password), "
                          "as Kafka's tools take it.")(f)
    return _bootstrap_option(f)


def _run(coro):
    from snakka.client.admin import AdminError

    try:
        return asyncio.run(coro)
    except AdminError as e:
        raise click.ClickException(str(e)) from None
    except (ConnectionError, OSError, TimeoutError) as e:
        raise click.ClickException(f"cannot reach the broker: {e or type(e).__name__}") from None
    except ValueError as e:  # a bad client config (TlsConfigError names it)
        raise click.ClickException(str(e)) from None


def _kv(items: tuple[str, ...], what: str) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise click.BadParameter(f"expected KEY=VALUE, got {it!r}", param_hint=what)
        k, v = it.split("=", 1)
        out[k] = v
    return out


@main.group()
def topics() -> None:
    """Create, list, describe and delete topics."""


@topics.command("create")
@click.argument("name")
@click.option("-p", "--partitions", type=int, default=-1, help="Default: num.partitions.")
@click.option("-r", "--replication-factor", type=int, default=-1)
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE")
@_bootstrap
def topics_create(name, partitions, replication_factor, configs, bootstrap) -> None:
    from snakka.client.admin import Admin

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            return await admin.create_topic(name, partitions, replication_factor,
                                            _kv(configs, "--config"))

    tid = _run(go())
    click.echo(f"Created topic {name} (id {tid}).")


@topics.command("list")
@_bootstrap
def topics_list(bootstrap) -> None:
    from snakka.client.admin import Admin

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            return await admin.list_topics()

    for t in sorted(_run(go()), key=lambda t: t.name):
        click.echo(t.name)


@topics.command("describe")
@click.argument("names", nargs=-1)
@_bootstrap
def topics_describe(names, bootstrap) -> None:
    """Partitions, offsets and config overrides; exits 1 if a named topic does not exist."""
    from snakka.client.admin import Admin
    from snakka.protocol.errors import ErrorCode
    from snakka.protocol.primitives import uuid_to_base64

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            ts = await admin.list_topics(list(names) or None)
            out = []
            for t in ts:
                if t.error_code:
                    out.append((t, None, None, None))
                    continue
                offsets = await admin.partition_offsets(t.name, len(t.partitions))
                configs = await admin.topic_overrides(t.name)
                tiers = None
                if configs.get("remote.storage.enable", "false").lower() == "true":
                    parts = range(len(t.partitions))
                    tiers = (await admin.list_offsets(t.name, parts, -4),  # earliest local
                             await admin.list_offsets(t.name, parts, -5),  # latest tiered
                             await admin.local_sizes(t.name, parts))
                out.append((t, offsets, configs, tiers))
            return out

    failed = []
    for t, offsets, configs, tiers in _run(go()):
        if offsets is None:
            failed.append(f"{t.name}: {ErrorCode(t.error_code).name}")
            continue
        cfg = ",".join(f"{k}={v}" for k, v in sorted(configs.items())) or "(defaults)"
        click.secho(f"{t.name}  id {uuid_to_base64(t.topic_id)}  "
                    f"partitions {len(t.partitions)}  configs {cfg}", bold=True)
        rows = []
        for p in sorted(t.partitions, key=lambda p: p.partition_index):
            i = p.partition_index
            lo, hi = offsets[i]
            row = [str(i), str(p.leader_id), ",".join(map(str, p.replica_nodes)), str(lo),
                   str(hi), str(hi - lo)]
            if tiers is not None:
                local_start, tiered, size = tiers[0][i], tiers[1][i], tiers[2].get(i, 0)
                # remote: [log start, local start); not yet copied: after the latest tiered
                row += [str(local_start), str(tiered), str(local_start - lo),
                        str(hi - max(tiered + 1, lo)), str(size)]
            rows.append(row)
        header = ["partition", "leader", "replicas", "log start", "log end", "records"]
        if tiers is not None:
            header += ["local start", "latest tiered", "remote only", "not yet tiered",
                       "local bytes"]
        _print_table(header, rows)
    if failed:
        # As kafka-topics.sh --describe: a topic that does not exist is an error (exit 1).
        raise click.ClickException("topic " + "; topic ".join(failed))


@topics.command("delete")
@click.argument("names", nargs=-1, required=True)
@_bootstrap
def topics_delete(names, bootstrap) -> None:
    from snakka.client.admin import Admin

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            await admin.delete_topics(list(names))

    _run(go())
    for n in names:
        click.echo(f"Deleted topic {n}.")


@main.group()
def groups() -> None:
    """List, describe, delete consumer and share groups, reset their offsets, set their
    configs."""


@groups.command("list")
@_bootstrap
def groups_list(bootstrap) -> None:
    from snakka.client.groups import GroupsAdmin

    async def go():
        async with GroupsAdmin(bootstrap, config=_client_config()) as admin:
            return await admin.list_groups()

    for gid, gtype, state, _ptype in _run(go()):
        click.echo(f"{gid}\t{gtype}\t{state}")


@groups.command("describe")
@click.argument("group_ids", nargs=-1, required=True)
@_bootstrap
def groups_describe(group_ids, bootstrap) -> None:
    """Members, assignments, committed offsets and lag per partition (consumer and share
    groups)."""
    from snakka.client.groups import GroupsAdmin

    async def go():
        async with GroupsAdmin(bootstrap, config=_client_config()) as admin:
            return [await admin.describe(g) for g in group_ids]

    for info in _run(go()):
        members = {m.member_id: m for m in info.members}
        click.secho(f"{info.group_id}  type {info.group_type}  state {info.state}"
                    f"  {'protocol' if info.group_type == 'classic' else 'assignor'} "
                    f"{info.protocol or '-'}  members {len(info.members)}", bold=True)
        # A share group's "current offset" is the share-partition start offset, and a
        # partition may be assigned to several members.
        rows = []
        for (topic, p), (cur, end, owner) in sorted(info.partitions.items()):
            ms = [members[o] for o in (owner or "").split(",") if o in members]
            rows.append([topic, str(p), str(cur) if cur >= 0 else "-", str(end),
                         str(end - cur) if cur >= 0 else "-", owner or "-",
                         ",".join(m.host for m in ms) or "-",
                         ",".join(m.client_id for m in ms) or "-"])
        _print_table(["topic", "partition",
                      "start-offset" if info.group_type == "share" else "current-offset",
                      "log-end-offset", "lag", "consumer-id", "host", "client-id"], rows)


@groups.command("delete")
@click.argument("group_ids", nargs=-1, required=True)
@_bootstrap
def groups_delete(group_ids, bootstrap) -> None:
    from snakka.client.groups import GroupsAdmin

    async def go():
        async with GroupsAdmin(bootstrap, config=_client_config()) as admin:
            await admin.delete_groups(list(group_ids))

    _run(go())
    for g in group_ids:
        click.echo(f"Deleted group {g}.")


@groups.command("reset-offsets")
@click.argument("group_id")
@click.option("--topic", required=True, help="TOPIC or TOPIC:0,1,2")
@click.option("--to-earliest", "mode", flag_value="earliest")
@click.option("--to-latest", "mode", flag_value="latest")
@click.option("--to-offset", type=int, default=None)
@click.option("--shift-by", type=int, default=None)
@click.option("--to-datetime", default=None, help="ISO 8601, e.g. 2026-11-21T10:00:00Z")
@click.option("--execute", is_flag=True, help="Commit the new offsets (default: dry run).")
@_QUIET
@_bootstrap
def groups_reset_offsets(group_id, topic, mode, to_offset, shift_by, to_datetime, execute,
                         quiet, bootstrap) -> None:
    """Move a group's committed offsets, or a share group's start offsets (the group must
    have no active members, as Kafka requires)."""
    from datetime import datetime

    from snakka.client.groups import GroupsAdmin

    value = None
    if to_offset is not None:
        mode, value = "offset", to_offset
    elif shift_by is not None:
        mode, value = "shift", shift_by
    elif to_datetime is not None:
        try:
            ts = datetime.fromisoformat(to_datetime.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(to_datetime, param_hint="--to-datetime") from None
        mode, value = "datetime", int(ts.timestamp() * 1000)
    if mode is None:
        raise click.UsageError("choose one of --to-earliest, --to-latest, --to-offset, "
                               "--shift-by, --to-datetime")
    name, _, parts = topic.partition(":")
    try:
        partitions = [int(p) for p in parts.split(",")] if parts else None
    except ValueError:
        raise click.BadParameter(f"expected TOPIC or TOPIC:0,1,2, got {topic!r}",
                                 param_hint="--topic") from None

    async def go():
        async with GroupsAdmin(bootstrap, config=_client_config()) as admin:
            return await admin.reset_offsets(group_id, name, partitions, mode, value, execute)

    with _status(f"{'Resetting' if execute else 'Planning'} offsets of {group_id} on {name}",
                 quiet=quiet):
        rows = _run(go())
    for t, p, cur, new in rows:
        click.echo(f"{t}\t{p}\t{cur if cur >= 0 else '-'}\t{new}")
    click.echo("Offsets committed." if execute else "Dry run: add --execute to commit.",
               err=True)


_CONFIG_SOURCES = {1: "topic", 2: "broker", 3: "cluster-default", 4: "static-broker",
                   5: "default", 8: "group"}


@groups.command("configs")
@click.argument("group_id")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set a group config, e.g. share.auto.offset.reset=earliest (repeatable).")
@click.option("--delete", "deletes", multiple=True, metavar="KEY",
              help="Remove a group override, back to the broker's value (repeatable).")
@_bootstrap
def groups_configs(group_id, sets, deletes, bootstrap) -> None:
    """Show a group's configs, or change them with --set / --delete (as kafka-configs.sh
    --entity-type groups): share.auto.offset.reset, share.record.lock.duration.ms,
    share.delivery.count.limit, consumer.session.timeout.ms, ... A group need not exist yet."""
    from snakka.client.groups import GroupsAdmin

    changes: dict[str, str | None] = dict(_kv(sets, "--set"))
    changes.update({k: None for k in deletes})

    async def go():
        async with GroupsAdmin(bootstrap, config=_client_config()) as admin:
            if changes:
                await admin.alter_group_configs(group_id, changes)
            return await admin.group_config_entries(group_id)

    entries = _run(go())
    if changes:
        click.echo(f"Updated configs of group {group_id}.", err=True)
    _print_table(["config", "value", "source"],
                 [[name, "null" if value is None else value,
                   _CONFIG_SOURCES.get(source, str(source))] for name, value, source in entries])


# -- acls (kafka-acls.sh) --------------------------------------------------------------------
# Kafka's kafka-acls.sh vocabulary: --allow-principal / --deny-principal (repeatable),
# --allow-host / --deny-host (default *), --operation (repeatable, default All), one or more
# resources (--topic, --group, --transactional-id, --cluster), --resource-pattern-type.
def _acl_options(f):
    for opt in reversed([
        click.option("--topic", "topics_", multiple=True, help="Topic (repeatable; '*': all)."),
        click.option("--group", "groups_", multiple=True, help="Consumer group (repeatable)."),
        click.option("--transactional-id", "txn_ids", multiple=True,
                     help="Transactional id (repeatable)."),
        click.option("--cluster", is_flag=True, help="The cluster resource."),
        click.option("--resource-pattern-type", "pattern", default=None,
                     help="literal | prefixed (add); also any | match (list, remove). "
                          "Default: literal (list without a resource: any)."),
        click.option("--allow-principal", "allow_principals", multiple=True,
                     metavar="TYPE:NAME", help="e.g. User:alice (repeatable)."),
        click.option("--deny-principal", "deny_principals", multiple=True,
                     metavar="TYPE:NAME"),
        click.option("--allow-host", "allow_hosts", multiple=True,
                     help="Default * when --allow-principal is given."),
        click.option("--deny-host", "deny_hosts", multiple=True,
                     help="Default * when --deny-principal is given."),
        click.option("--operation", "operations", multiple=True,
                     help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, "
                          "AlterConfigs, DescribeConfigs, IdempotentWrite, All (repeatable; "
                          "default All)."),
        _bootstrap,
    ]):
        f = opt(f)
    return f


def _acl_enum(enum, text: str, what: str):
    wanted = text.replace("-", "").replace("_", "").upper()
    for member in enum:
        if member.name.replace("_", "") == wanted:
            return member
    raise click.BadParameter(f"unknown {what} {text!r}", param_hint=f"--{what}")


def _acl_resources(topics_, groups_, txn_ids, cluster) -> list[tuple]:
    from snakka.protocol.acls import ResourceType

    out = [(ResourceType.TOPIC, t) for t in topics_]
    out += [(ResourceType.GROUP, g) for g in groups_]
    out += [(ResourceType.TRANSACTIONAL_ID, t) for t in txn_ids]
    if cluster:
        out.append((ResourceType.CLUSTER, "kafka-cluster"))
    return out


def _acl_entries(allow_principals, deny_principals, allow_hosts, deny_hosts,
                 operations) -> list[tuple]:
    """(principal, host, operation, permission) for every combination, as kafka-acls.sh."""
    from snakka.protocol.acls import AclOperation, AclPermissionType

    ops = [_acl_enum(AclOperation, o, "operation") for o in operations] or [AclOperation.ALL]
    out = []
    for perm, principals, hosts in ((AclPermissionType.ALLOW, allow_principals, allow_hosts),
                                    (AclPermissionType.DENY, deny_principals, deny_hosts)):
        for p in principals:
            if ":" not in p:
                raise click.BadParameter(f"expected TYPE:NAME (e.g. User:alice), got {p!r}",
                                         param_hint="--allow-principal/--deny-principal")
            out += [(p, h, op, perm) for h in (hosts or ("*",)) for op in ops]
    return out


@main.group()
def acls() -> None:
    """Add, list and remove ACLs (the broker needs authorizer.class.name; kafka-acls.sh's
    options)."""


@acls.command("add")
@_acl_options
def acls_add(topics_, groups_, txn_ids, cluster, pattern, allow_principals, deny_principals,
             allow_hosts, deny_hosts, operations, bootstrap) -> None:
    """Add ACLs: every principal x host x operation, on every resource given."""
    from snakka.client.admin import AclBinding, Admin
    from snakka.protocol.acls import PatternType

    ptype = _acl_enum(PatternType, pattern or "literal", "resource-pattern-type")
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise click.BadParameter("adding needs literal or prefixed",
                                 param_hint="--resource-pattern-type")
    resources = _acl_resources(topics_, groups_, txn_ids, cluster)
    entries = _acl_entries(allow_principals, deny_principals, allow_hosts, deny_hosts,
                           operations)
    if not resources or not entries:
        raise click.UsageError("give a resource (--topic, --group, --transactional-id, "
                               "--cluster) and --allow-principal or --deny-principal")
    bindings = [AclBinding(rt, name, ptype, *e) for rt, name in resources for e in entries]

    async def go():
        async with Admin(bootstrap, config=_client_config()) as a:
            await a.create_acls(bindings)

    _run(go())
    for b in bindings:
        click.echo(f"Added ACL {b.entry()} for resource `{b.resource()}`")


def _acl_filters(topics_, groups_, txn_ids, cluster, pattern, principals, hosts,
                 operations) -> list:
    from snakka.client.admin import AclFilter
    from snakka.protocol.acls import AclOperation, PatternType

    ptype = _acl_enum(PatternType, pattern, "resource-pattern-type")
    ops = [_acl_enum(AclOperation, o, "operation") for o in operations] or [AclOperation.ANY]
    resources = _acl_resources(topics_, groups_, txn_ids, cluster) or [(None, None)]
    out = []
    for rt, name in resources:
        for p in principals or (None,):
            for h in hosts or (None,):
                for op in ops:
                    kw = {} if rt is None else {"resource_type": rt, "resource_name": name}
                    out.append(AclFilter(pattern_type=ptype, principal=p, host=h,
                                         operation=op, **kw))
    return out


@acls.command("list")
@_acl_options
@click.option("--principal", "principals", multiple=True, help="Only this principal's ACLs.")
def acls_list(topics_, groups_, txn_ids, cluster, pattern, allow_principals, deny_principals,
              allow_hosts, deny_hosts, operations, bootstrap, principals) -> None:
    """List ACLs (of the resources given, else all), grouped by resource."""
    from snakka.client.admin import Admin

    default = "literal" if _acl_resources(topics_, groups_, txn_ids, cluster) else "any"
    filters = _acl_filters(topics_, groups_, txn_ids, cluster, pattern or default, principals,
                           (), operations)

    async def go():
        async with Admin(bootstrap, config=_client_config()) as a:
            found: dict = {}
            for f in filters:
                for b in await a.describe_acls(f):
                    found.setdefault(b.resource(), {})[b] = None
            return found

    for resource, bindings in _run(go()).items():
        click.echo(f"Current ACLs for resource `{resource}`: ")
        for b in bindings:
            click.echo(f" \t{b.entry()} ")
        click.echo()


@acls.command("remove")
@_acl_options
@click.option("--force", is_flag=True, help="Accepted for kafka-acls.sh compatibility (snakka "
              "does not ask for confirmation).")
def acls_remove(topics_, groups_, txn_ids, cluster, pattern, allow_principals, deny_principals,
                allow_hosts, deny_hosts, operations, bootstrap, force) -> None:
    """Remove the ACLs given (every principal x host x operation), or every ACL of the
    resources given when no principal is."""
    from snakka.client.admin import AclFilter, Admin
    from snakka.protocol.acls import PatternType

    if not _acl_resources(topics_, groups_, txn_ids, cluster):
        raise click.UsageError("give a resource (--topic, --group, --transactional-id, "
                               "--cluster)")
    if allow_principals or deny_principals:
        ptype = _acl_enum(PatternType, pattern or "literal", "resource-pattern-type")
        filters = [AclFilter(rt, name, ptype, *e)
                   for rt, name in _acl_resources(topics_, groups_, txn_ids, cluster)
                   for e in _acl_entries(allow_principals, deny_principals, allow_hosts,
                                         deny_hosts, operations)]
    else:
        filters = _acl_filters(topics_, groups_, txn_ids, cluster, pattern or "literal", (),
                               (), operations)

    async def go():
        async with Admin(bootstrap, config=_client_config()) as a:
            return await a.delete_acls(filters)

    for b in _run(go()):
        click.echo(f"Removed ACL {b.entry()} from resource `{b.resource()}`")


@main.group()
def transactions() -> None:
    """List and describe transactions, describe producers, find and abort hanging
    transactions (what kafka-transactions.sh does)."""


@transactions.command("list")
@click.option("--duration-filter", type=int, default=None, metavar="MS",
              help="Only transactions running longer than this many ms (< 0: all).")
@click.option("--state", "states", multiple=True,
              help="Only these states (Kafka's names: Ongoing, PrepareCommit, ...; "
                   "repeatable).")
@click.option("--producer-id", "producer_ids", type=int, multiple=True,
              help="Only these producer ids (repeatable).")
@_bootstrap
def transactions_list(duration_filter, states, producer_ids, bootstrap) -> None:
    """The transactional ids every broker coordinates."""
    from snakka.client.admin import Admin

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            return await admin.list_transactions(
                states=states, producer_ids=producer_ids,
                duration_ms=-1 if duration_filter is None else duration_filter)

    _print_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"],
                 [[t.transactional_id, str(t.coordinator_id), str(t.producer_id), t.state]
                  for t in _run(go())])


@transactions.command("describe")
@click.option("--transactional-id", required=True)
@_bootstrap
def transactions_describe(transactional_id, bootstrap) -> None:
    """The coordinator's state of one transactional id."""
    import time

    from snakka.client.admin import Admin

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            return await admin.describe_transaction(transactional_id)

    d = _run(go())
    started = d.transaction_start_time_ms
    duration = str(time.time_ns() // 1_000_000 - started) if started >= 0 else "None"
    _print_table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                  "TransactionState", "TransactionTimeoutMs", "CurrentTransactionStartTimeMs",
                  "TransactionDurationMs", "TopicPartitions"],
                 [[str(d.coordinator_id), d.transactional_id, str(d.producer_id),
                   str(d.producer_epoch), d.state, str(d.transaction_timeout_ms),
                   str(started) if started >= 0 else "None", duration,
                   ",".join(f"{t}-{p}" for t, p in d.partitions)]])


def _topic_partition(f):
    """--topic and --partition, both required (describe-producers, abort)."""
    f = click.option("--partition", type=click.IntRange(min=0), required=True)(f)
    return click.option("--topic", required=True)(f)


@transactions.command("describe-producers")
@_topic_partition
@_bootstrap
def transactions_describe_producers(topic, partition, bootstrap) -> None:
    """The active producers of a partition (open transactions show their start offset)."""
    from snakka.client.admin import Admin

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            return (await admin.describe_producers(topic, [partition]))[partition]

    _print_table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                  "LastTimestamp", "CurrentTransactionStartOffset"],
                 [[str(p.producer_id), str(p.producer_epoch), str(p.coordinator_epoch),
                   str(p.last_sequence), str(p.last_timestamp),
                   str(p.current_txn_start_offset) if p.current_txn_start_offset >= 0
                   else "None"] for p in _run(go())])


@transactions.command("abort")
@_topic_partition
@click.option("--start-offset", type=click.IntRange(min=0), default=None,
              help="Start offset of the transaction to abort (its producer is looked up).")
@click.option("--producer-id", type=int, default=None, help="Or the producer explicitly ...")
@click.option("--producer-epoch", type=int, default=None, help="... its epoch ...")
@click.option("--coordinator-epoch", type=int, default=None,
              help="... and the coordinator epoch (-1 is taken as 0).")
@_bootstrap
def transactions_abort(topic, partition, start_offset, producer_id, producer_epoch,
                       coordinator_epoch, bootstrap) -> None:
    """Abort a hanging transaction: write an ABORT marker to the partition (needs ALTER or
    CLUSTER_ACTION on the cluster)."""
    from snakka.client.admin import Admin

    if start_offset is None and producer_id is None:
        raise click.UsageError("identify the transaction with --start-offset, or with "
                               "--producer-id, --producer-epoch and --coordinator-epoch")
    if start_offset is None and (producer_epoch is None or coordinator_epoch is None):
        raise click.UsageError("--producer-id needs --producer-epoch and --coordinator-epoch")

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            spec = (producer_id, producer_epoch, coordinator_epoch) if start_offset is None \
                else await admin.abort_spec(topic, partition, start_offset)
            await admin.abort_transaction(topic, partition, *spec)
            return spec

    pid, epoch, cepoch = _run(go())
    click.echo(f"Aborted the transaction of producer {pid} (epoch {epoch}, coordinator epoch "
               f"{max(cepoch, 0)}) on {topic}-{partition}.")


@transactions.command("find-hanging")
@click.option("--broker-id", type=int, default=None,
              help="Search every partition with a replica on this broker.")
@click.option("--max-transaction-timeout", type=click.IntRange(min=0), default=15,
              show_default=True, metavar="MINUTES",
              help="Only transactions open longer than this (the brokers' "
                   "transaction.max.timeout.ms).")
@click.option("--topic", default=None, help="Limit the search to a topic.")
@click.option("--partition", type=click.IntRange(min=0), default=None,
              help="Limit it to a partition (needs --topic).")
@_bootstrap
def transactions_find_hanging(broker_id, max_transaction_timeout, topic, partition,
                              bootstrap) -> None:
    """Open transactions no coordinator will finish (abort them with `abort`)."""
    import time

    from snakka.client.admin import Admin

    if topic is None and broker_id is None:
        raise click.UsageError("find-hanging needs --topic or --broker-id to limit the search")
    if partition is not None and topic is None:
        raise click.UsageError("--partition needs --topic")

    async def go():
        async with Admin(bootstrap, config=_client_config()) as admin:
            return await admin.find_hanging(
                topic=topic, partition=partition, broker_id=broker_id,
                max_transaction_timeout_ms=max_transaction_timeout * 60_000)

    hanging = _run(go())
    now = time.time_ns() // 1_000_000
    _print_table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                  "StartOffset", "LastTimestamp", "Duration(min)"],
                 [[h.topic, str(h.partition), str(h.producer.producer_id),
                   str(h.producer.producer_epoch), str(h.producer.coordinator_epoch),
                   str(h.producer.current_txn_start_offset), str(h.producer.last_timestamp),
                   str((now - h.producer.last_timestamp) // 60_000)] for h in hanging])


@main.command()
@click.argument("topic")
@click.option("-k", "--key-separator", default=None,
              help="Split each line into key and value at the first occurrence of this string.")
@click.option("-H", "--header", "headers", multiple=True, metavar="KEY=VALUE",
              help="A header added to every record.")
@click.option("-p", "--partition", type=int, default=None,
              help="Target partition (default: by key hash, as Kafka's partitioner, else round robin).")
@click.option("--acks", type=click.Choice(["0", "1", "-1", "all"]), default="all", show_default=True)
@click.option("--compression", type=click.Choice(["none", "gzip", "snappy", "lz4", "zstd"]),
              default="none", show_default=True)
@_QUIET
@_bootstrap
def produce(topic, key_separator, headers, partition, acks, compression, quiet,
            bootstrap) -> None:
    """Produce lines from standard input, one record per line."""
    from snakka.client.admin import Admin

    hdrs = [(k, v.encode()) for k, v in _kv(headers, "--header").items()]
    lines = [ln.rstrip("\n") for ln in sys.stdin]

    async def go(update):
        async with Admin(bootstrap, config=_client_config()) as admin:
            return await admin.produce_lines(topic, lines, key_separator=key_separator,
                                             headers=hdrs, partition=partition,
                                             acks=-1 if acks == "all" else int(acks),
                                             compression=compression, on_progress=update)

    with _progress(f"Producing to {topic}", len(lines), quiet=quiet) as update:
        n = _run(go(update))
    click.echo(f"Produced {n} record(s) to {topic}.", err=True)


@main.command()
@click.argument("topic")
@click.option("-p", "--partition", type=int, default=None, help="Only this partition.")
@click.option("--from-beginning", is_flag=True,
              help="Start at the earliest offset (default: latest; with --group, only where "
                   "the group has no committed offset).")
@click.option("--offset", type=int, default=None, help="Start at this offset (needs --partition).")
@click.option("-n", "--max-messages", type=int, default=None, help="Exit after N records.")
@click.option("--timeout-ms", type=int, default=None,
              help=f"Exit when no record arrives for this long; -1 waits forever. Default: "
                   f"{DEFAULT_CONSUME_TIMEOUT_MS} when reading history (--from-beginning or "
                   f"--offset) without -n, else forever.")
@click.option("-g", "--group", default=None,
              help="Commit the positions reached to this consumer group and start where it "
                   "left off (partitions are read directly, so the group has no members; "
                   "`groups describe` shows its offsets and lag).")
@click.option("--print-key", is_flag=True)
@click.option("--print-offset", is_flag=True)
@click.option("--print-headers", is_flag=True)
@_QUIET
@_bootstrap
def consume(topic, partition, from_beginning, offset, max_messages, timeout_ms, group,
            print_key, print_offset, print_headers, quiet, bootstrap) -> None:
    """Print records of a topic (reads partitions directly; --group commits offsets)."""
    from snakka.client.groups import GroupsAdmin

    if offset is not None and partition is None:
        raise click.BadParameter("--offset needs --partition", param_hint="--offset")
    if offset is not None and offset < 0:
        raise click.BadParameter("must be >= 0", param_hint="--offset")
    if max_messages is not None and max_messages < 1:
        raise click.BadParameter("must be >= 1", param_hint="--max-messages")
    if timeout_ms is None:
        reads_history = from_beginning or offset is not None
        timeout_ms = DEFAULT_CONSUME_TIMEOUT_MS if reads_history and max_messages is None else -1
    idle_timeout_ms = None if timeout_ms < 0 else timeout_ms

    shown = 0
    update: Callable[[int], None] = lambda done: None  # noqa: E731 - set by _progress below

    def show(rec, p):
        nonlocal shown
        shown += 1
        update(shown)
        parts = []
        if print_offset:
            parts.append(f"{p}:{rec.offset}")
        if print_key:
            parts.append(_text(rec.key))
        if print_headers:
            parts.append(",".join(f"{k}={_text(v)}" for k, v in rec.headers) or "-")
        parts.append(_text(rec.value))
        click.echo("\t".join(parts))

    async def go():
        async with GroupsAdmin(bootstrap, config=_client_config()) as admin:
            positions = None
            on_progress = None
            if group is not None:
                committed = {p: o for (t, p), o in (await admin.committed(group)).items()
                             if t == topic}
                # An explicit --offset wins over the group's position; otherwise resume.
                positions = committed if offset is None else None
                last: dict[int, int] = dict(committed)

                async def on_progress(pos: dict[int, int]) -> None:
                    changed = {(topic, p): o for p, o in pos.items() if last.get(p) != o}
                    if changed:
                        await admin.commit_offsets(group, changed)
                        last.update({p: o for (_, p), o in changed.items()})

            return await admin.consume(topic, show, partition=partition,
                                       start="earliest" if from_beginning else
                                       (offset if offset is not None else "latest"),
                                       max_messages=max_messages,
                                       idle_timeout_ms=idle_timeout_ms,
                                       positions=positions, on_progress=on_progress)

    try:
        # A bar only with -n: otherwise how many records will come is unknown.
        with _progress(f"Consuming {topic}", max_messages, quiet=quiet) as update:
            n = _run(go())
    except KeyboardInterrupt:
        return
    click.echo(f"Processed {n} record(s).", err=True)


# -- pipeline (issue 5: the reference Spark streaming pipeline) -----------------------------
# The verbs only parse options here; pyspark is imported by snakka.spark.pipeline when they run.
_PIPELINE_EPILOG = ("Needs the spark extra (pip install 'snakka[spark]') and Java 17. On a "
                    "cluster: --master spark://HOST:7077 -b BROKERS --output-dir SHARED_PATH, "
                    "with snakka installed for the executors' Python (PYSPARK_PYTHON).")


def _with_options(f, options):
    for opt in reversed(options):
        f = opt(f)
    return f


def _pipeline_options(f):
    """Options shared by the pipeline verbs that run the Spark job or the check."""
    return _with_options(f, [
        click.option("--master", default="local[*]", show_default=True,
                     help="Spark master URL, e.g. spark://host:7077."),
        click.option("--output-dir", default="pipeline-output", show_default=True,
                     help="Parquet output and checkpoint (shared storage on a cluster)."),
        click.option("--input-topic", default="clickstream", show_default=True),
        click.option("--output-topic", default="clickstream-aggregates", show_default=True),
        click.option("--window-ms", type=click.IntRange(min=1), default=10_000,
                     show_default=True, help="Tumbling event-time window."),
        click.option("--watermark-ms", type=click.IntRange(min=0), default=10_000,
                     show_default=True, help="Watermark delay (how late an event may be)."),
    ])


def _require_spark() -> None:
    """The Spark verbs need the spark extra and a Java runtime: say so in one line."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as e:
        raise click.ClickException(
            f"the Spark pipeline needs the spark extra ({e.name or 'pyspark'} is not "
            f"installed): {SPARK_EXTRA_HINT}") from None
    import shutil

    if not (os.environ.get("JAVA_HOME") or shutil.which("java")):
        raise click.ClickException("Spark needs a Java 17+ runtime and none was found: install "
                                   "one (e.g. apt-get install openjdk-17-jre-headless) or set "
                                   "JAVA_HOME")


@contextlib.contextmanager
def _pipeline_errors():
    """A failed query, an unreachable broker, a refused request or a failed check: one clean
    line instead of a traceback."""
    from snakka.client.admin import AdminError
    from snakka.spark.pipeline.check import CheckError
    from snakka.spark.pipeline.generator import ProduceError
    from snakka.spark.pipeline.job import StreamingJobError

    try:
        yield
    except (StreamingJobError, CheckError, AdminError, ProduceError, TimeoutError) as e:
        raise click.ClickException(str(e)) from None
    except (ConnectionError, OSError) as e:
        raise click.ClickException(f"cannot reach the broker: {e or type(e).__name__}") from None


def _generator_options(rate: float):
    """The generator's options (demo and generate); ``rate`` is the default pace."""
    def wrap(f):
        return _with_options(f, [
            click.option("-n", "--events", type=click.IntRange(min=1), default=200_000,
                         show_default=True),
            click.option("--rate", type=float, default=rate, show_default=True,
                         help="Events produced per second of wall time (0 = as fast as "
                              "possible)."),
            click.option("--seed", type=int, default=42, show_default=True),
            click.option("--event-rate", type=click.FloatRange(min=0, min_open=True),
                         default=1000, show_default=True,
                         help="Events per second of event time in the stream."),
            click.option("--partitions", type=click.IntRange(min=1), default=3,
                         show_default=True, help="Partitions of the input topic if created."),
        ])
    return wrap


def _pipeline_settings(bootstrap, output_dir, input_topic, output_topic, window_ms,
                       watermark_ms, **kw):
    from snakka.spark.pipeline.job import PipelineSettings

    return PipelineSettings(bootstrap_servers=bootstrap, output_dir=output_dir,
                            input_topic=input_topic, output_topic=output_topic,
                            window_ms=window_ms, watermark_delay_ms=watermark_ms,
                            client_config=_client_config(), **kw)


@main.group(epilog=_PIPELINE_EPILOG)
def pipeline() -> None:
    """The reference Spark streaming pipeline: clickstream -> windowed aggregates.

    `snakka pipeline demo` runs everything (embedded broker, generator, Structured Streaming
    job, batch cross-check); generate / stream / check run the pieces separately.
    """


@pipeline.command("demo", epilog=_PIPELINE_EPILOG)
@click.option("-b", "--bootstrap-server", "bootstrap", default=None,
              help="Use this broker instead of an embedded snakka broker.")
@_generator_options(rate=10_000)
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), default=20_000,
              show_default=True, help="Records per micro-batch at most.")
@click.option("--trigger", "trigger_interval", default="1 second", show_default=True)
@_pipeline_options
def pipeline_demo(bootstrap, events, rate, seed, event_rate, partitions, max_offsets_per_trigger,
                  trigger_interval, master, output_dir, input_topic, output_topic, window_ms,
                  watermark_ms) -> None:
    """Generate events, stream-aggregate them, cross-check with a batch job."""
    _require_spark()
    from rich.console import Console

    from snakka.demo import run_demo

    with _pipeline_errors():
        result = run_demo(console=Console(), master=master, bootstrap=bootstrap, events=events,
                          rate=rate or None, seed=seed, events_per_second=event_rate,
                          partitions=partitions,
                          output_dir=output_dir, input_topic=input_topic,
                          output_topic=output_topic, window_ms=window_ms,
                          watermark_delay_ms=watermark_ms,
                          max_offsets_per_trigger=max_offsets_per_trigger,
                          trigger_interval=trigger_interval)
    if not result.report.ok:
        sys.exit(1)


@pipeline.command("generate")
@click.option("--topic", default="clickstream", show_default=True)
@_generator_options(rate=0)
@_QUIET
@_bootstrap
def pipeline_generate(topic, events, rate, seed, event_rate, partitions, quiet,
                      bootstrap) -> None:
    """Produce the deterministic clickstream (JSON, keyed by user, some late events)."""
    from snakka.spark.pipeline.events import generate_events
    from snakka.spark.pipeline.generator import produce_events

    with _pipeline_errors(), _progress(f"Generating {topic}", events, quiet=quiet,
                                       unit="events") as update:
        stats = asyncio.run(produce_events(
            bootstrap, topic, generate_events(events, seed=seed, events_per_second=event_rate),
            partitions=partitions, rate=rate or None, on_progress=update,
            config=_client_config()))
    click.echo(f"Produced {stats.events} events to {topic} in {stats.seconds:.1f} s "
               f"({stats.events_per_second:,.0f}/s).", err=True)


@pipeline.command("stream", epilog=_PIPELINE_EPILOG)
@click.option("--max-offsets-per-trigger", type=click.IntRange(min=1), default=None)
@click.option("--trigger", "trigger_interval", default="1 second", show_default=True)
@click.option("--available-now", is_flag=True,
              help="Process what the topic holds now, then stop (Trigger.AvailableNow).")
@_pipeline_options
@_bootstrap
def pipeline_stream(max_offsets_per_trigger, trigger_interval, available_now, master,
                    output_dir, input_topic, output_topic, window_ms, watermark_ms,
                    bootstrap) -> None:
    """Run the Structured Streaming job (until Ctrl-C, or drained with --available-now)."""
    _require_spark()
    from rich.console import Console

    from snakka.spark.pipeline.job import (
        LogEndOffsets,
        ProgressMonitor,
        check_query_failed,
        start_query,
    )
    from snakka.spark.pipeline.session import build_spark

    settings = _pipeline_settings(bootstrap, output_dir, input_topic, output_topic, window_ms,
                                  watermark_ms, max_offsets_per_trigger=max_offsets_per_trigger,
                                  trigger_interval=trigger_interval, available_now=available_now)
    console = Console()
    spark = build_spark(master)
    try:
        with _pipeline_errors():
            query = start_query(spark, settings)
            monitor = ProgressMonitor(console, LogEndOffsets(bootstrap, input_topic,
                                                             settings.client_config))
            try:
                while query.isActive:
                    monitor.poll(query)
                    try:
                        # PySpark takes int or float seconds; its annotation says int only.
                        query.awaitTermination(0.5)  # type: ignore[arg-type]
                    except Exception:  # the query failed: reported below
                        break
                monitor.poll(query)
            except KeyboardInterrupt:
                query.stop()
            check_query_failed(query)
    finally:
        spark.stop()


@pipeline.command("check", epilog=_PIPELINE_EPILOG)
@_pipeline_options
@_bootstrap
def pipeline_check(master, output_dir, input_topic, output_topic, window_ms, watermark_ms,
                   bootstrap) -> None:
    """Batch job: re-derive the stream's output from the full topic history; exit 1 on a
    mismatch."""
    _require_spark()
    from rich.console import Console

    from snakka.spark.pipeline.check import run_check
    from snakka.spark.pipeline.session import build_spark

    settings = _pipeline_settings(bootstrap, output_dir, input_topic, output_topic, window_ms,
                                  watermark_ms)
    spark = build_spark(master)
    try:
        with _pipeline_errors():
            report = run_check(spark, settings, console=Console())
    finally:
        spark.stop()
    if not report.ok:
        sys.exit(1)


def _text(b: bytes | None) -> str:
    if b is None:
        return "null"
    try:
        return b.decode()
    except UnicodeDecodeError:
        return b.hex()


# -- users: SCRAM credentials (issue 14, SASL) ---------------------------------------------
def _users_admin(bootstrap: str):
    from snakka.client.admin import Admin

    return Admin(bootstrap, config=_client_config())


_SCRAM_MECHANISMS = click.Choice(["SCRAM-SHA-256", "SCRAM-SHA-512"], case_sensitive=False)


@main.group()
def users() -> None:
    """SCRAM users: list, describe, add/alter and delete credentials
    (Describe/AlterUserScramCredentials)."""


@users.command("list")
@_bootstrap
def users_list(bootstrap) -> None:
    async def go():
        async with _users_admin(bootstrap) as admin:
            return await admin.describe_users()

    for name, creds in sorted(_run(go()).items()):
        click.echo(f"{name}\t" + ",".join(f"{m}(iterations={i})" for m, i in creds))


@users.command("describe")
@click.argument("names", nargs=-1, required=True)
@_bootstrap
def users_describe(names, bootstrap) -> None:
    async def go():
        async with _users_admin(bootstrap) as admin:
            return await admin.describe_users(list(names))

    for name, creds in _run(go()).items():
        for mech, iterations in creds:
            click.echo(f"{name}\t{mech}\titerations={iterations}")


@users.command("add")
@click.argument("name")
@click.option("--mechanism", type=_SCRAM_MECHANISMS, default="SCRAM-SHA-512", show_default=True)
@click.option("--iterations", type=int, default=4096, show_default=True)
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True,
              envvar="SNAKKA_USER_PASSWORD", help="Prompted for when not given "
              "(env SNAKKA_USER_PASSWORD).")
@_bootstrap
def users_add(name, mechanism, iterations, password, bootstrap) -> None:
    """Add a SCRAM credential, or change it (the same as ``users alter``)."""
    async def go():
        async with _users_admin(bootstrap) as admin:
            await admin.upsert_user(name, mechanism.upper(), password, iterations)

    _run(go())
    click.echo(f"Set {mechanism.upper()} credential of user {name} ({iterations} iterations).")


users.add_command(users_add, "alter")


@users.command("delete")
@click.argument("name")
@click.option("--mechanism", type=_SCRAM_MECHANISMS, default="SCRAM-SHA-512", show_default=True)
@_bootstrap
def users_delete(name, mechanism, bootstrap) -> None:
    async def go():
        async with _users_admin(bootstrap) as admin:
            await admin.delete_user(name, mechanism.upper())

    _run(go())
    click.echo(f"Deleted {mechanism.upper()} credential of user {name}.")
# -- end of users --------------------------------------------------------------------------


# -- migrate (issue 17: outgrowing one machine) ------------------------------------------
@main.group()
def migrate() -> None:
    """Move to Apache Kafka: check a stopped data dir, write Kafka's server.properties for it,
    or a MirrorMaker 2 config for the online path (docs/migrating.md)."""


@migrate.command("check")
@click.option("--data-dir", required=True, type=click.Path(file_okay=False),
              help="The snakka data directory (log.dirs).")
def migrate_check(data_dir) -> None:
    """Whether Kafka 4.0 can start on the (stopped) data dir as it is; exits 1 if not."""
    from snakka.migrate import check_data_dir, next_steps

    report = check_data_dir(data_dir)
    counts = ", ".join(f"{t} {n}" for t, n in sorted(report.internal_partitions.items()))
    click.echo(f"{report.data_dir}: node {report.node_id}, cluster {report.cluster_id}, "
               f"{report.partitions} partitions" + (f" ({counts})" if counts else ""))
    for e in report.errors:
        click.secho(f"ERROR   {e}", fg="red")
    for w in report.warnings:
        click.secho(f"WARNING {w}", fg="yellow")
    click.echo("Ready for Kafka 4.0." if report.ok else "Not ready for Kafka.")
    click.echo("Next steps:")
    for i, step in enumerate(next_steps(report), 1):
        click.echo(f"  {i}. {step}")
    if not report.ok:
        raise SystemExit(1)


@migrate.command("kafka-config")
@click.option("--data-dir", required=True, type=click.Path(exists=True, file_okay=False),
              help="The snakka data directory (log.dirs).")
@click.option("-c", "--config", "config_file", type=click.Path(exists=True, dir_okay=False),
              help="The server.properties snakka ran with (its configs carry over).")
@click.option("-o", "--override", multiple=True, metavar="KEY=VALUE",
              help="A config snakka ran with, as `snakka serve -o` (repeatable).")
@click.option("--listeners", help="Kafka's client listeners (default: snakka's).")
@click.option("--controller-listener", metavar="CONTROLLER://HOST:PORT",
              help="The KRaft controller's listener (default: the first listener's host, "
                   "port 9093).")
@click.option("--log-dirs", help="Where the directory will be on the Kafka host "
                                 "(default: --data-dir).")
@click.option("--quorum", type=click.Choice(["auto", "static", "dynamic"]), default="auto",
              show_default=True,
              help="controller.quorum.voters (static) or .bootstrap.servers (dynamic); auto: "
                   "dynamic if the metadata log holds a voter set.")
@click.option("--out", type=click.Path(dir_okay=False), help="Write here (default: stdout).")
def migrate_kafka_config(data_dir, config_file, override, listeners, controller_listener,
                         log_dirs, quorum, out) -> None:
    """Write the Kafka 4.0 server.properties that runs on the data dir."""
    from snakka.config import BrokerConfig, ConfigError
    from snakka.migrate import MigrateError, kafka_server_properties

    text = open(config_file).read() if config_file else ""
    try:
        cfg = BrokerConfig.from_properties(text, _kv(override, "--override"))
        result = kafka_server_properties(data_dir, cfg.overrides, listeners=listeners,
                                         controller_listener=controller_listener,
                                         log_dirs=log_dirs, quorum=quorum)
    except (ConfigError, MigrateError) as e:
        raise click.ClickException(str(e)) from None
    _write_or_echo(result.render(), out)


def _check_bootstrap_list(ctx, param, value: str) -> str:
    for item in value.split(","):
        _check_bootstrap(ctx, param, item.strip())
    return value


@migrate.command("mirror-config")
@click.option("--source", required=True, callback=_check_bootstrap_list,
              help="The snakka broker, HOST:PORT.")
@click.option("--target", required=True, callback=_check_bootstrap_list,
              help="The Kafka cluster's bootstrap servers, HOST:PORT[,HOST:PORT...].")
@click.option("--topics", default=".*", show_default=True, help="Topics to mirror (regex).")
@click.option("--groups", default=".*", show_default=True,
              help="Consumer groups whose offsets are translated (regex).")
@click.option("--replication-factor", type=click.IntRange(min=1), default=3,
              show_default=True, help="The target's, for mirrored and MM2's topics.")
@click.option("--source-alias", default="snakka", show_default=True)
@click.option("--target-alias", default="kafka", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), help="Write here (default: stdout).")
def migrate_mirror_config(source, target, topics, groups, replication_factor, source_alias,
                          target_alias, out) -> None:
    """Write a MirrorMaker 2 config (connect-mirror-maker.sh) mirroring snakka to Kafka with
    the same topic names and consumer-group offsets translated."""
    from snakka.migrate import MigrateError, mirror_maker_properties, render_properties

    try:
        props = mirror_maker_properties(source, target, source_alias=source_alias,
                                        target_alias=target_alias, topics=topics,
                                        groups=groups, replication_factor=replication_factor)
    except MigrateError as e:
        raise click.ClickException(str(e)) from None
    _write_or_echo(render_properties(props, "MirrorMaker 2 (bin/connect-mirror-maker.sh) from "
                                            "snakka to Kafka: `snakka migrate mirror-config`"),
                   out)


def _write_or_echo(text: str, out: str | None) -> None:
    if out is None:
        click.echo(text, nl=False)
        return
    try:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    except OSError as e:
        raise click.ClickException(f"cannot write {out}: {e.strerror or e}") from None
    click.echo(f"Wrote {out}.", err=True)
# -- end of migrate ------------------------------------------------------------------------


if __name__ == "__main__":  # pragma: no cover
    main()
