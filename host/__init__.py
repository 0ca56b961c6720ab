"""polymath-host: serve Polymath libraries over HTTP."""
