"""Data: sources (digits, torchvision, PFLlib directories), pure partition functions, FederatedData.

    >>> from fedala_lab.config import DataConfig
    >>> from fedala_lab.data import FederatedData
    >>> fd = FederatedData.from_config(DataConfig(dataset="digits", partition="dirichlet", beta=0.1))
"""

from .federated import FederatedData

__all__ = ["FederatedData", "load_pfllib", "load_pool"]


def __getattr__(name):  # keep `import fedala_lab.data` light; sources pull in scikit-learn
    if name == "load_pool":
        from .sources import load_pool

        return load_pool
    if name == "load_pfllib":
        from .pfllib import load_pfllib

        return load_pfllib
    raise AttributeError(name)
