"""Case studies built only from public propopt verbs.

They are the library's first users: the Mamba selective scan, the streaming
top-K and the Barnes-Hut N-body code (each arrives in its own subpackage).
"""
