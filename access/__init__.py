"""Access rules for polymath-host (SPEC §4): who may see which access tags.

    control = AccessControl.from_file(Path("access.SECRET.json"))
    grant = control.authorize(token)      # Grant, or raises TokenRejected (answer 401)
    grant.access_tags                     # the tags it may see (host/library/visibility.py applies them)

Modules, one job each: ``errors`` (the two exceptions), ``grant`` (Grant, ANONYMOUS),
``keys`` (key entries), ``config`` (the file, validated), ``tokens`` (issue/verify JWTs),
``files`` (atomic 0600 writes), ``control`` (AccessControl: authorize + reload),
``cli`` (the admin commands); for trusted identity providers ``issuers``, ``claim_rules``,
``jwks``, ``fetching``, ``discovery``, ``issuer_keys``, ``provider_tokens``, ``explain`` and
``issuer_cli``. See access/README.md for the file format and token design.
"""

from .config import AccessSettings
from .control import AccessControl
from .errors import AccessConfigError, TokenRejected
from .grant import ANONYMOUS, Grant

__all__ = ["ANONYMOUS", "AccessConfigError", "AccessControl", "AccessSettings", "Grant", "TokenRejected"]
