"""Library files: the SPEC's JSON format parsed and checked (format), and who may see a bit (visibility)."""
