"""Writes into the folder given the tokenizer files a Trainer with processing_class=tokenizer saves in each
checkpoint-N/ (tokenizer.json, tokenizer_config.json, ...): a WordLevel tokenizer t0..t251 + 4 specials,
built offline with the tokenizers library (the fixtures were trained without a tokenizer)."""
import sys

from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

vocab = {f"t{i}": i for i in range(252)}
vocab.update({"<unk>": 252, "<s>": 253, "</s>": 254, "<pad>": 255})
tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                               pad_token="<pad>")
for d in sys.argv[1:]:
    print(fast.save_pretrained(d))
