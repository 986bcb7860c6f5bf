"""The compression lab: DDP under fp16/bf16, PowerSGD and top-k comm hooks, bytes and loss measured.

- ``lab``: parameters, summary and text report (no torch: the platform reads it);
- ``rank``: the model, the data and one training run per strategy and seed (the ranks import it);
- ``hooks``: the communication hooks, and the counter that measures what they send.
"""
