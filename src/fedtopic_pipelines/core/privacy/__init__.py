"""Privacy mechanisms that updates need, below the engine: clipping and noise (client-level DP),
DP-SGD, robust rules, and the accounting that sets the noise.

The server's reducer under these is ``core/federated/privacy.py``; the keyed vocabulary
exchange is ``core/vocab/privacy.py``; the attacks and the run's privacy report (audits of
a finished run) are ``core/audit/``."""
