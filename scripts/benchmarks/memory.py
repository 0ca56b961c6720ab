"""Step `memory`: RSS and PSS of the server with --workers 1 and 2, at the middle size (exact search touches every page)."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from .config import Config, label
from .report import say, table
from .servers import first_answer, post, spawn_server
from .step import SERVER, Numbers, Results, Size, Step


def mapped_here(path: Path) -> bool:
    """Whether this process maps `path`: its mapping would take a share of the server's PSS."""
    return str(path.resolve()) in Path("/proc/self/maps").read_text()


def smaps_rollup(pid: int) -> dict[str, int]:
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        values[name.strip()] = int(rest.split()[0]) * 1024
    return values


def command_line(pid: int) -> str:
    with contextlib.suppress(OSError):
        parts = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        text = " ".join(part.decode(errors="replace") for part in parts if part)
        if " serve " in f" {text} ":
            return "serve (main)"
        return "resource tracker" if "resource_tracker" in text else "worker" if "multiprocessing" in text else text[:60]
    return "?"


def measure(size: Size) -> Numbers | None:
    if size.bits != size.config.mid:
        return None
    say(f"{label(size.bits)}: memory with 1 and 2 workers")
    folder, bodies = size.folder, size.bodies[2:-1]
    matrix = folder / ".compiled" / "bench" / "embeddings.npy"
    result: Numbers = {"matrix_bytes": matrix.stat().st_size, "queries": len(bodies),
                       "mapped_by_this_process": mapped_here(matrix)}
    for workers in (1, 2):
        with spawn_server(size.config.workdir, folder, workers=workers, search="exact") as server:
            first_answer(server, bodies[0], timeout=300)
            # Two threads of short connections, so both workers get queries.
            errors: list[str] = []

            def send(port: int, part: list[bytes], errors: list[str]) -> None:
                for body in part:
                    status, _ = post(port, body, timeout=60)
                    if status != 200:
                        errors.append(str(status))
            threads = [threading.Thread(target=send, args=(server.port, bodies[i::2], errors)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=300)
            processes = []
            for pid in server.pids():
                with contextlib.suppress(OSError):
                    rollup = smaps_rollup(pid)
                    processes.append({"pid": pid, "role": command_line(pid), "rss": rollup.get("Rss", 0),
                                      "pss": rollup.get("Pss", 0), "pss_anon": rollup.get("Pss_Anon", 0),
                                      "pss_file": rollup.get("Pss_File", 0), "shared_clean": rollup.get("Shared_Clean", 0)})
            result[f"workers={workers}"] = {"processes": processes, "errors": errors,
                                            "rss_total": sum(p["rss"] for p in processes),
                                            "pss_total": sum(p["pss"] for p in processes)}
    return result


def report(results: Results, config: Config) -> list[str]:
    out = []
    for bits, entry in results["sizes"].items():
        memory = entry.get("memory")
        if not memory:
            continue
        rows = []
        for workers in (1, 2):
            run = memory[f"workers={workers}"]
            for process in run["processes"]:
                rows.append([f"{workers}", process["pid"], process["role"], f"{process['rss'] / 2**20:,.0f}",
                             f"{process['pss'] / 2**20:,.0f}", f"{process['pss_file'] / 2**20:,.0f}",
                             f"{process['pss_anon'] / 2**20:,.0f}"])
            rows.append([f"{workers}", "", "**total**", f"{run['rss_total'] / 2**20:,.0f}", f"{run['pss_total'] / 2**20:,.0f}",
                         "", ""])
        out.append(table(f"Server memory at {label(bits)} (--search exact, after queries; "
                         f"matrix {memory['matrix_bytes'] / 2**20:,.0f} MiB), MiB",
                         ["workers", "pid", "process", "RSS", "PSS", "PSS file", "PSS anon"], rows, left=3,
                         note="RSS counts shared pages in every process; PSS splits them: the total PSS is what the host "
                         "really costs."
                         + (" (Warning: the benchmark process still mapped the matrix, so it took a share of the PSS.)"
                            if memory["mapped_by_this_process"] else f" Measured after {memory['queries']} queries.")))
    return out


STEP = Step("memory", "RSS and PSS of the server with --workers 1 and 2 (exact search touches every page)", SERVER,
            measure, report)
