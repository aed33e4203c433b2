"""Parameter-efficient training's settings (`PeftConfig`, plain data: no torch); its modules and their
application to a built model live in `dgmoe.models.peft`."""
from dgmoe.peft.config import PeftConfig

__all__ = ["PeftConfig"]
