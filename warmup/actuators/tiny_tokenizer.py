"""Save a word-level tokenizer for the tiny test Llama (vocab 1024) into a model directory.

Run with the vLLM virtualenv's interpreter (it has ``tokenizers``; warmcast's own environment
does not): ``.venv-vllm/bin/python warmup/actuators/tiny_tokenizer.py DIR``, or
:func:`warmup.actuators.launch.write_tiny_tokenizer`.  Token i is the word ``t<i>``
(0-2 are <unk>, <s>, </s>), split on whitespace: decoding ids and encoding the text gives the
same ids back, so a generator that builds prompts as text (``vllm bench serve``'s random
dataset) sends exactly the prompt lengths it asks for; ``vllm bench serve`` also takes its vocabulary
to draw the token ids of calibration's prompts.

``--chars``: one token per character instead (printable ASCII, newline and tab, then other
printable code points up to the vocabulary's size).  GuideLLM builds its prompts by encoding
Faker's English text and sends them as text, which the word-level vocabulary reads as nothing
but ``<unk>``; here every such character is a token, and decoding any ids then encoding the
text gives the same ids back, so a server started with this tokenizer serves both tools.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

VOCAB = 1024
SPECIAL = ["<unk>", "<s>", "</s>"]


def characters(n: int) -> list[str]:
    """``n`` single-character tokens: ASCII text first, then printable non-space code points."""
    chars, code = ["\n", "\t"] + [chr(c) for c in range(32, 127)], 0xC0
    while len(chars) < n:
        if chr(code).isprintable() and not chr(code).isspace():
            chars.append(chr(code))
        code += 1
    return chars[:n]


def build(directory: Path, chars: bool = False) -> Path:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    words = characters(VOCAB - len(SPECIAL)) if chars else [f"t{i}" for i in range(len(SPECIAL), VOCAB)]
    vocab = {w: i for i, w in enumerate(SPECIAL + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    if chars:
        tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
        tok.decoder = decoders.Fuse()  # characters joined as they are
    else:
        tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    directory.mkdir(parents=True, exist_ok=True)
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>",
        "model_max_length": 2048, "add_bos_token": False, "add_eos_token": False}))
    return directory


if __name__ == "__main__":
    print(build(Path(sys.argv[1]), chars="--chars" in sys.argv[2:]))
