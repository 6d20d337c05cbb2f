"""The papers' experiments (sweeps, baselines, scoring), built on the library in ``core/``.

``config.py`` holds their parameter blocks (``fednmf``, ``pctd``, ``synthetic``); ``fednmf.py``,
``pctd.py`` and ``synthetic.py`` run them. Like ``core/`` this package imports no kedro, flwr
or mlflow, nor the glue around it; ``core/`` does not import it (docs/architecture.md, "Layers").
"""
