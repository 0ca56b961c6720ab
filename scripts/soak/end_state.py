"""After the load: every library served in the last good version published, deleted ones not at all."""

from __future__ import annotations

import httpx

from .model import TEXT, library_name
from .publisher import Publisher


def final_state_problems(url: str, token: str, publisher: Publisher) -> list[str]:
    problems = []
    for library, version in sorted(publisher.current.items()):
        name = library_name(library)
        for _ in range(6):  # several fresh connections: every worker
            response = httpx.get(f"{url}/libraries/{name}.json", headers={"Authorization": f"Bearer {token}"})
            if version is None:
                if response.status_code != 404:
                    problems.append(f"{name} was deleted but is served ({response.status_code})")
                continue
            if response.status_code != 200:
                problems.append(f"{name} should be served in version {version}: {response.status_code}")
                continue
            served = {match[2] for bit in response.json()["bits"] if (match := TEXT.match(bit["text"]))}
            if served != {str(version)}:
                problems.append(f"{name} is served in version(s) {sorted(served)}, not {version}")
    return problems
