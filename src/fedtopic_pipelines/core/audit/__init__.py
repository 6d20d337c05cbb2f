"""Privacy audits of a federation: an honest-but-curious server's attacks, and a run's privacy report."""
