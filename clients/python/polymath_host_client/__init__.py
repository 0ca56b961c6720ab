"""polymath-host-client: a small typed client of polymath-host, sync and async.

    from polymath_host_client import PolymathClient
    with PolymathClient("http://127.0.0.1:8080", token=None) as host:
        for passage in host.retrieve("a great fish swallowed the prophet", k=4):
            print(passage.score, passage.title, passage.url)

Framework retrievers live in `polymath_host_client.langchain` (extra `[langchain]`) and
`polymath_host_client.llama_index` (extra `[llama-index]`).
"""

from polymath_host_client.client import DEFAULT_TIMEOUT, AsyncPolymathClient, Mode, PolymathClient
from polymath_host_client.errors import HostError, HostTimeout, HostUnreachable, PolymathError, TokenRefused
from polymath_host_client.results import Answer, Bit, Library, Passage

__version__ = "0.1.0"
__all__ = [
    "DEFAULT_TIMEOUT", "Answer", "AsyncPolymathClient", "Bit", "HostError", "HostTimeout", "HostUnreachable",
    "Library", "Mode", "Passage", "PolymathClient", "PolymathError", "TokenRefused",
]
