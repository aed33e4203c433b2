"""The configs of the listing and data commands (`dgmoe.cli.config`): validated where declared, and light."""
import subprocess
import sys

import pytest

from dgmoe.cli.config import DataCheckConfig, DataInfoConfig, DataPrepareConfig, ModelsListConfig
from dgmoe.peft.config import PEFT_MODES
from dgmoe.settings import ConfigError


def test_models_list_takes_every_peft_mode_but_none():
    assert ModelsListConfig(peft="all").peft == "all"
    for mode in PEFT_MODES[1:]:
        assert ModelsListConfig(peft=mode).peft == mode
    with pytest.raises(ConfigError, match="--peft must be one of"):
        ModelsListConfig(peft="nope")


@pytest.mark.parametrize("config", [DataInfoConfig, DataPrepareConfig, DataCheckConfig])
def test_required_fields_are_required(config):
    with pytest.raises(ConfigError, match="is required"):
        config()


def test_sizes_must_be_positive():
    with pytest.raises(ConfigError, match="--img-size must be >= 1"):
        DataInfoConfig(dataset="PACS", img_size=0)


def test_importing_the_configs_imports_no_torch():
    code = "import sys, dgmoe.cli.config; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]
