"""dgmoe: domain generalization with sparse mixture-of-experts vision transformers."""
from dgmoe.models import count_parameters, create_model, list_models

__version__ = "0.1.0"
__all__ = ["count_parameters", "create_model", "list_models", "__version__"]
