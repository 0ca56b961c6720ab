"""`polymath-host`: serve, build and validate libraries; `access` and `token` for admins."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

import access.cli
from access import AccessConfigError, AccessControl
from host.catalog import default_cache_dir, discover, load_catalog
from host.library_format import LibraryFormatError, parse_library
from host.settings import ENVIRONMENT_VARIABLE, Settings
from host.store import DEFAULT_MAX_SOURCE_BYTES, read_library_file

DEFAULT_ACCESS_FILE = Path("access.SECRET.json")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "func"):
        parser.print_help()
        return 2
    return args.func(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polymath-host",
        description="Host Polymath libraries: answer similarity queries over HTTP, with access tokens.",
    )
    commands = parser.add_subparsers(metavar="COMMAND")

    serve = commands.add_parser("serve", help="serve the libraries over HTTP", description=(
        "Load (compiling on demand) every library file under --libraries and answer Polymath queries."))
    serve.add_argument("--libraries", type=Path, default=Path("libraries"), metavar="PATH",
                       help="a folder of library files, or one file (default: libraries/)")
    serve.add_argument("--access", type=Path, default=None, metavar="FILE",
                       help="the access file (default: access.SECRET.json if present; without one only public bits are served)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to bind (default 127.0.0.1, this machine only; 0.0.0.0 listens on every interface)")
    serve.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    serve.add_argument("--workers", type=int, default=1,
                       help="worker processes (default 1); they share the memory-mapped libraries")
    serve.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                       help="where compiled libraries go (default: <libraries>/.compiled)")
    serve.add_argument("--max-body-bytes", type=int, default=Settings.max_body_bytes, metavar="N",
                       help=f"largest request body accepted (default {Settings.max_body_bytes:,})")
    serve.add_argument("--max-count", type=int, default=Settings.max_count, metavar="N",
                       help=f"largest count a query may ask for (default {Settings.max_count:,})")
    serve.add_argument("--body-read-timeout", type=float, default=Settings.body_read_timeout, metavar="SECONDS",
                       help=f"longest wait for the next chunk of a request body (default {Settings.body_read_timeout:g})")
    serve.add_argument("--rate-limit", type=float, default=Settings.rate_limit_per_second, metavar="PER_SECOND",
                       help="requests per second allowed per client (its token, else its address) and worker; "
                            "0 (default) means no limit")
    serve.add_argument("--rate-burst", type=int, default=Settings.rate_limit_burst, metavar="N",
                       help=f"requests a client may make at once above the rate (default {Settings.rate_limit_burst})")
    serve.add_argument("--watch-interval", type=float, default=Settings.watch_interval, metavar="SECONDS",
                       help="how often to look for published, changed or deleted library files "
                            f"(default {Settings.watch_interval:g}; 0 turns it off; SIGHUP reloads at once)")
    serve.add_argument("--blas-threads", type=int, default=Settings.blas_threads, metavar="N",
                       help="threads each query's matrix product may use (default 1: a loaded server answers "
                            "more queries, sooner, when concurrent queries do not fight over cores; 0 lets "
                            "the BLAS library choose, faster for a lone client on a large exact library)")
    serve.add_argument("--search", choices=["auto", "exact", "approximate"], default="auto",
                       help="exact scans every vector; approximate scans sign-bit codes first and re-scores "
                            "the nearest exactly; auto (default) is approximate when the caller may see at least "
                            "--approximate-from bits of the model")
    serve.add_argument("--approximate-from", type=int, default=Settings.approximate_from_bits, metavar="BITS",
                       help=f"with --search auto, the number of bits a caller may see from which search is approximate (default {Settings.approximate_from_bits:,})")
    serve.add_argument("--oversample", type=int, default=Settings.oversample, metavar="N",
                       help=f"approximate search re-scores at least this many nearest codes exactly (default {Settings.oversample:,})")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    _add_max_library_bytes(serve)
    serve.set_defaults(func=serve_command)

    build = commands.add_parser("build", help="compile libraries to their memory-mapped form", description=(
        "Compile library files (or folders of them) now, so that serve starts without parsing JSON."))
    build.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    build.add_argument("--cache-dir", type=Path, default=None, metavar="DIR",
                       help="where compiled libraries go (default: <folder>/.compiled)")
    _add_max_library_bytes(build)
    build.set_defaults(func=build_command)

    validate = commands.add_parser("validate", help="check library files", description=(
        "Check library files (or folders of them); print one line per problem and exit 1 if there is any."))
    validate.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    _add_max_library_bytes(validate)
    validate.set_defaults(func=validate_command)

    access.cli.register(commands)
    return parser


def _add_max_library_bytes(command: argparse.ArgumentParser) -> None:
    command.add_argument("--max-library-bytes", type=int, default=DEFAULT_MAX_SOURCE_BYTES, metavar="N",
                         help=f"largest library file accepted (default {DEFAULT_MAX_SOURCE_BYTES:,})")


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def configure_logging(level: str) -> None:
    """Service logs as text on stderr; the access log as bare JSON lines on stdout, for log shippers."""
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    access_lines = logging.StreamHandler(sys.stdout)
    access_lines.setFormatter(logging.Formatter("%(message)s"))
    access_log = logging.getLogger("polymath_host.access_log")
    access_log.addHandler(access_lines)
    access_log.propagate = False


def limit_blas_threads(threads: int) -> None:
    """Applies to this process from now on, numpy already loaded or not."""
    if threads > 0:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=threads, user_api="blas")


def serve_command(args: argparse.Namespace) -> int:
    import uvicorn

    from host.web.app import LOG_LEVEL_VARIABLE, create_app

    configure_logging(args.log_level)
    if not args.libraries.exists():
        _say(f"error: {args.libraries} does not exist; pass --libraries PATH (a folder of library files)")
        return 1
    access_file = args.access if args.access is not None else (DEFAULT_ACCESS_FILE if DEFAULT_ACCESS_FILE.exists() else None)
    if args.access is not None and not args.access.exists():
        _say(f"error: access file {args.access} does not exist; create it with: polymath-host access init --access {args.access}")
        return 1
    try:
        access_control = AccessControl.from_file(access_file)
    except AccessConfigError as problem:
        _say(f"error: {problem}")
        return 1
    settings = Settings(
        libraries=args.libraries,
        access=access_file,
        cache_dir=args.cache_dir,
        max_body_bytes=args.max_body_bytes,
        max_count=args.max_count,
        max_library_bytes=args.max_library_bytes,
        body_read_timeout=args.body_read_timeout,
        rate_limit_per_second=args.rate_limit,
        rate_limit_burst=args.rate_burst,
        watch_interval=args.watch_interval,
        blas_threads=args.blas_threads,
        search=args.search,
        approximate_from_bits=args.approximate_from,
        oversample=args.oversample,
    )
    limit_blas_threads(settings.blas_threads)
    started = time.perf_counter()
    catalog = load_catalog(args.libraries, cache_dir=args.cache_dir, max_bytes=args.max_library_bytes, progress=_say)
    for problem in catalog.problems:
        _say(f"skipped {problem}")
    bits = sum(library.bit_count for library in catalog.libraries)
    _say(f"loaded {len(catalog.libraries)} libraries ({bits:,} bits) in {time.perf_counter() - started:.2f} s"
         + (f"; {len(catalog.problems)} skipped (see above)" if catalog.problems else ""))
    _say(f"serving on http://{args.host}:{args.port}/" + (f" with access rules from {access_file}" if access_file else
                                                         " (public bits only: no access file)"))
    if args.workers > 1:
        # Workers are separate processes: they get the settings through the environment and
        # open the libraries this process has just compiled.
        os.environ[ENVIRONMENT_VARIABLE] = settings.to_environment()
        os.environ[LOG_LEVEL_VARIABLE] = args.log_level  # workers set up their own logs from it
        # uvicorn binds the workers' shared socket with proto 0, so asyncio never sets TCP_NODELAY on
        # their connections and every keep-alive answer waits ~40 ms for a delayed ACK (uvicorn
        # issue #3149). Rebuild the bound socket as TCP; the workers inherit it.
        bind_socket = uvicorn.Config.bind_socket

        def bind_tcp_socket(config: uvicorn.Config) -> socket.socket:
            bound = bind_socket(config)
            if bound.family not in (socket.AF_INET, socket.AF_INET6):
                return bound
            return socket.socket(bound.family, bound.type, socket.IPPROTO_TCP, fileno=bound.detach())

        uvicorn.Config.bind_socket = bind_tcp_socket  # type: ignore[method-assign]
        uvicorn.run("host.web.app:app_from_environment", factory=True, host=args.host, port=args.port,
                    workers=args.workers, log_level=args.log_level, access_log=False)
    else:
        app = create_app(settings, catalog=catalog, access=access_control)
        # uvicorn re-raises SIGTERM after its graceful shutdown, which would kill us with -15;
        # a stop we were asked for is a clean exit (0), as it already is with --workers N.
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
        uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=False)
    return 0


def build_command(args: argparse.Namespace) -> int:
    failed = 0
    for path in args.paths:
        if not path.exists():
            _say(f"error: {path} does not exist")
            failed += 1
            continue
        started = time.perf_counter()
        catalog = load_catalog(path, cache_dir=args.cache_dir or default_cache_dir(path),
                               max_bytes=args.max_library_bytes, progress=_say)
        for problem in catalog.problems:
            _say(f"error: {problem}")
        failed += len(catalog.problems)
        bits = sum(library.bit_count for library in catalog.libraries)
        _say(f"{path}: {len(catalog.libraries)} libraries, {bits:,} bits ready in {time.perf_counter() - started:.2f} s")
    return 1 if failed else 0


def validate_command(args: argparse.Namespace) -> int:
    problems = 0
    for path in args.paths:
        if not path.exists():
            print(f"{path}: does not exist")
            problems += 1
            continue
        for entry in discover(path):
            try:
                library = parse_library(read_library_file(entry.path, args.max_library_bytes),
                                        access_tag=entry.access_tag, consume=True)
            except (LibraryFormatError, OSError) as problem:
                print(f"{entry.path}: {problem}")
                problems += 1
                continue
            dropped = f", {library.duplicates_dropped} duplicate bits dropped" if library.duplicates_dropped else ""
            print(f"{entry.path}: ok, {len(library.ids)} bits, {library.embedding_model}, "
                  f"dimension {library.dimension}{dropped}")
    return 1 if problems else 0
