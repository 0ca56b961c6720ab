"""polymath-host: serve Polymath libraries over HTTP."""

# Where the manual (docs/, built with MkDocs) is published: the page's footer and `--help` link here,
# and mkdocs.yml's site_url says the same (tests/test_manual.py checks).
MANUAL_URL = "https://polymath-host.github.io/polymath-host/"
