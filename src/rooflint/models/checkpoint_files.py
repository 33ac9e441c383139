"""What a --weights checkpoint's files say, read without loading a weight or importing torch and
transformers: that it holds weight files, that every tensor is a float (from the safetensors
headers), the model_type its config.json names, and that config.json as JSON.

models/base.py's check_checkpoint and model_run's checkpoint_config judge a checkpoint with these;
`rooflint model` also calls them before its heavy imports (seconds) where the spec's checks are known
without its module, so a checkpoint that is not one is refused at once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rooflint.core.errors import UserError
from rooflint.models import architectures

# safetensors dtypes a checkpoint's tensors may hold: any float is cast to the run's --dtype; an
# integer or fp8 tensor is a quantized checkpoint (its scales elsewhere), which a cast would garble.
FLOAT_CHECKPOINT_DTYPES = ("F16", "BF16", "F32", "F64")
WEIGHT_FILES = ("*.safetensors", "*.bin")  # what from_pretrained loads (single files, shards beside their index)
# spec module -> the model_type its --weights checkpoints hold (ModelSpec.checkpoint_model_type), for
# the specs that name it: known here, without the module, a checkpoint of another architecture is
# refused before the heavy imports. A spec whose loader reads the checkpoint's config.json itself
# (llama's) is not here.
CHECKPOINT_MODEL_TYPES = {"rooflint.models.gpt2": "gpt2"}


def check_weight_files(weights_dir: Path) -> None:
    """The directory holds weight files, and every tensor of its safetensors files is a float."""
    # from_pretrained's own refusal came after the "building" line (two lines for one bad flag)
    if not any(any(Path(weights_dir).glob(pattern)) for pattern in WEIGHT_FILES):
        raise UserError(
            f"--weights {weights_dir} holds no weight file; valid: a save_pretrained checkpoint directory "
            f"({', '.join(WEIGHT_FILES)})"
        )
    from safetensors import SafetensorError, safe_open

    for path in sorted(Path(weights_dir).glob("*.safetensors")):
        try:
            # numpy, not pt: the headers' dtype names are the same, and reading them imports no torch
            with safe_open(str(path), "numpy") as handle:
                for key in handle.keys():
                    dtype = handle.get_slice(key).get_dtype()
                    if dtype not in FLOAT_CHECKPOINT_DTYPES:
                        raise UserError(
                            f"--weights {path}: tensor {key} is {dtype}; valid: a float checkpoint "
                            f"({', '.join(FLOAT_CHECKPOINT_DTYPES)}), not a quantized one"
                        )
        except SafetensorError as error:
            raise UserError(f"--weights {path} is not a readable safetensors file: {error}") from None


def check_model_type(weights_dir: Path, expected: str | None) -> None:
    """A checkpoint of another architecture refused by name, not loaded with its config's fields
    unread (each then takes the class's default) and every tensor missing or unexpected."""
    try:
        found = json.loads((Path(weights_dir) / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return  # no readable config.json: from_pretrained says so in its own words
    if expected and found != expected:
        raise UserError(f"--weights {weights_dir} holds a model_type={found!r} checkpoint; valid: {expected!r}")


def read_config(weights_dir: Path) -> dict[str, Any]:
    """The checkpoint's config.json as JSON, or one line saying why it cannot be read."""
    path = Path(weights_dir) / "config.json"
    return architectures.read_json_config(
        path,
        f"--weights {path}",
        lambda why: (
            f"--weights {weights_dir} holds no readable config.json ({why}); valid: a save_pretrained "
            "checkpoint directory"
        ),
    )
