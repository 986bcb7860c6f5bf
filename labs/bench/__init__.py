"""The collective benchmark lab: an nccl-tests-style sweep, busbw and an alpha-beta fit.

- ``lab``: parameters, summary and text report (no torch: the platform reads it);
- ``rank``: the sweep one rank times and checks (the ranks import it).
"""
