"""Plain ASGI middleware, one concern per module."""

from host.web.middleware.access_log import AccessLog
from host.web.middleware.body_guard import RequestBodyGuard
from host.web.middleware.link_header import POLYMATH_LINK, PolymathLinkHeader
from host.web.middleware.rate_limit import RateLimit

__all__ = ["POLYMATH_LINK", "AccessLog", "PolymathLinkHeader", "RateLimit", "RequestBodyGuard"]
