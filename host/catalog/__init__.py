"""The loaded set of libraries: a generation of compiled libraries (generations), every library of
one model under one row numbering (model_index), and hot publishing of new generations (reloader)."""
