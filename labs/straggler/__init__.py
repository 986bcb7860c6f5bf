"""The straggler lab: one rank slowed (``throttle``), DDP and local SGD timed on every rank (``rank``), the arithmetic and report (``lab``)."""
