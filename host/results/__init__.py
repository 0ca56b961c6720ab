"""Library rows turned into the version-1 libraries clients read: bits, query answers, published files."""
