"""The compiled form of a library: memory-mapped arrays on disk (compiled), in a clustered layout
from 10,000 bits (clusters), with sign-bit codes for libraries stored without one (sign_codes)."""
