"""`polymath-host serve`: load the libraries and answer queries over HTTP."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from access import AccessConfigError, AccessControl
from host.catalog.generations import load_catalog
from host.cli.common import add_setting_options, say
from host.service.allocator import limit_malloc_arenas
from host.service.process import LOG_LEVEL_VARIABLE, configure_logging, configure_scans, cores, limit_blas_threads
from host.service.settings import ENVIRONMENT_VARIABLE, Settings
from host.service.sources import StartRefused, open_sources
from host.store.residency import Residency


def register(commands: Any) -> None:
    serve = commands.add_parser("serve", help="serve the libraries over HTTP", description=(
        "Load (compiling on demand) every library file under --libraries and answer Polymath queries."))
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default 127.0.0.1, this machine only; 0.0.0.0 listens on every interface)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    serve.add_argument("--workers", type=int, default=cores(), metavar="N",
                       help=f"worker processes (default: one per core, {cores()} here); they share the memory-mapped "
                            "libraries, so each costs only its own memory (each says how much at start); "
                            "1 serves from this process")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    add_setting_options(serve)
    serve.set_defaults(func=serve_command)


def serve_command(args: argparse.Namespace) -> int:
    from host.web import server

    if args.workers < 1:
        say(f"error: --workers must be at least 1, got {args.workers}")
        return 1
    limit_malloc_arenas()  # before any thread starts (host/service/allocator.py says why)
    configure_logging(args.log_level)
    # Before anything is opened: a folder of many libraries maps several files each.
    open_files = server.raise_open_file_limit()
    settings = Settings.from_arguments(args)
    try:
        sources = open_sources(settings)
    except StartRefused as problem:
        say(f"error: {problem}")
        return 1
    with ThreadPoolExecutor(1) as background:
        # A replica's first sync downloads while the web stack is imported: most of a cold start is those two.
        syncing = background.submit(sources.first_sync)
        from host.web.app import create_app, embedders_for
        from host.web.dialects import mcp_server
        from host.web.middleware.cors import parse_cors_origins
        from host.web.page.sign_in import sign_in_config

        try:
            parse_cors_origins(settings.cors_origin)
        except ValueError as problem:
            say(f"error: --cors-origin: {problem}")
            return 1
        try:
            sign_in_config(settings.sign_in, settings.sign_in_client, settings.sign_in_scope,
                           settings.sign_in_parameters, settings.sign_in_token)
        except ValueError as problem:
            say(f"error: {problem}")
            return 1
        try:
            said = syncing.result()
        except StartRefused as problem:
            say(f"error: {problem}")
            return 1
        for line in [sources.trust_line(), *said]:
            if line is not None:
                say(line)
    settings, access_file = sources.settings, sources.access_file
    try:
        access_control = AccessControl.from_file(access_file)
    except AccessConfigError as problem:
        say(f"error: {problem}")
        return 1
    if settings.sign_in is not None and access_control.settings.trusted_issuer(settings.sign_in) is None:
        say(f"warning: --sign-in {settings.sign_in} is not a trusted issuer of {access_file}: the host refuses its "
            f"tokens until it is (polymath-host access trust {settings.sign_in} --audience AUD --grant RULE)")
    limit_blas_threads(settings.blas_threads)
    configure_scans(settings.scan_threads, settings.max_batch)
    started = time.perf_counter()
    catalog = load_catalog(sources.root, cache_dir=sources.compiled_dir, max_bytes=settings.max_library_bytes,
                           digests=sources.digests(),
                           progress=say, bars=True)
    for skipped in catalog.problems:
        say(f"skipped {skipped}")
    bits = sum(library.bit_count for library in catalog.libraries)
    say(f"loaded {len(catalog.libraries)} libraries ({bits:,} bits) in {time.perf_counter() - started:.2f} s"
        + (f"; {len(catalog.problems)} skipped (see above)" if catalog.problems else ""))
    try:
        embedders = embedders_for(settings, catalog)
    except ValueError as problem:
        say(f"error: {problem}")
        return 1
    unembedded = sorted(set(catalog.model_names) - set(embedders.models))
    if embedders.models:
        say(f"text queries for {', '.join(embedders.models)}")
    if unembedded:
        say(f"no text queries for {', '.join(unembedded)} (send query_embedding, or see --embedder-url)")
    say(mcp_server.status_line())
    say(server.prepare_worker(settings, open_files))
    say(f"serving on http://{args.host}:{args.port}/" + (
        f" with access rules from {access_file}" if access_file.exists() else
        (" (public bits only until a set published with --access arrives)" if sources.replica is not None
         and settings.access is None else
         f" (public bits only until {access_file} is created: polymath-host access init)")))
    where = {"host": args.host, "port": args.port, "workers": args.workers, "log_level": args.log_level}
    if args.workers > 1:
        say(f"{args.workers} worker processes" + (" (one per core)" if args.workers == cores() else "")
            + ", sharing the libraries' memory maps; --workers 1 serves from one process")
        # Workers are separate processes: they get the settings through the environment and
        # open the libraries this process has just compiled. Read into the page cache here (in
        # 2 MB pages where they can be, host/store/residency.py), the maps are there for every
        # worker to map at once; on a thread, while the workers start (they take a second to
        # import the service), not before. This process only supervises them: it lets go of the
        # catalog once that is done.
        segments = catalog.segments
        threading.Thread(target=Residency(settings.populate_bytes).admit, args=(segments,),
                         name="populate", daemon=True).start()
        del catalog, embedders, segments
        os.environ[ENVIRONMENT_VARIABLE] = settings.to_environment()
        os.environ[LOG_LEVEL_VARIABLE] = args.log_level
        server.run("host.web.app:app_from_environment", settings, **where)
    else:
        app = create_app(settings, catalog=catalog, access=access_control, embedders=embedders, sources=sources)
        # uvicorn re-raises SIGTERM after its graceful shutdown, which would kill us with -15;
        # a stop we were asked for is a clean exit (0), as it already is with --workers N.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        server.run(app, settings, **where)
    return 0
