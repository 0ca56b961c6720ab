"""Plain ASGI middleware, one concern per module."""

from host.web.middleware.access_log import AccessLog
from host.web.middleware.body_guard import RequestBodyGuard
from host.web.middleware.cors import CorsPolicy, CrossOrigin, parse_cors_origins
from host.web.middleware.dialect_errors import DialectErrors
from host.web.middleware.issuer_keys import IssuerKeysReady
from host.web.middleware.link_header import POLYMATH_LINK, PolymathLinkHeader
from host.web.middleware.publisher_prefix import PublisherPrefix, RefusedPrefix
from host.web.middleware.rate_limit import RateLimit
from host.web.middleware.security_headers import SecurityHeaders
from host.web.middleware.url_tokens import TokensOutOfURLs

__all__ = ["POLYMATH_LINK", "AccessLog", "CorsPolicy", "CrossOrigin", "DialectErrors", "IssuerKeysReady",
           "PolymathLinkHeader", "PublisherPrefix", "RateLimit", "RefusedPrefix", "RequestBodyGuard", "SecurityHeaders",
           "TokensOutOfURLs", "parse_cors_origins"]
