"""The failure lab: a rank killed under torchrun, the job restarted and resumed (``rank``), the launcher (``supervise``), the arithmetic and report (``lab``)."""
