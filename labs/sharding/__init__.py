"""The sharding lab: the memory each rank holds under DDP, ZeRO-1, ZeRO-2 and ZeRO-3 (FSDP2).

- ``lab``: parameters, summary and text report (no torch: the platform reads it);
- ``zero``: the four strategies on one rank, ZeRO-2 written by hand (the ranks import it).
"""
