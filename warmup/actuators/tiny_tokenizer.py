"""Save a word-level tokenizer for the tiny test Llama (vocab 1024) into a model directory.

Run with the vLLM virtualenv's interpreter (it has ``tokenizers``; warmcast's own environment
does not): ``.venv-vllm/bin/python warmup/actuators/tiny_tokenizer.py DIR``, or
:func:`warmup.actuators.launch.write_tiny_tokenizer`.  Token i is the word ``t<i>``
(0-2 are <unk>, <s>, </s>), split on whitespace: decoding ids and encoding the text gives the
same ids back, so a generator that builds prompts as text (``vllm bench serve``'s random
dataset) sends exactly the prompt lengths it asks for; ``vllm bench serve`` also takes its vocabulary
to draw the token ids of calibration's prompts.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 1024
SPECIAL = ["<unk>", "<s>", "</s>"]


def build(directory: Path) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {w: i for i, w in enumerate(SPECIAL + [f"t{i}" for i in range(len(SPECIAL), VOCAB)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>",
        "model_max_length": 2048, "add_bos_token": False, "add_eos_token": False}))
    return directory


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))
