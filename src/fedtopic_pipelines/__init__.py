"""fedtopic_pipelines: federated topic modelling as Kedro pipelines over a plain core library."""

__version__ = "0.1.0"
