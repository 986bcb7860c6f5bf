"""The DDP lab: DistributedDataParallel on a small MLP, measured section by section.

- ``lab``: parameters and summary (no torch: the platform reads it);
- ``rank``: the lessons' two functions and most sections (the ranks import it);
- ``setup``: the data, the model and the measuring tools the sections share;
- ``sampler``, ``timeline``: the sections of those names;
- ``text``: the text report.
"""
