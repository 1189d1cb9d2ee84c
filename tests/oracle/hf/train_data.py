"""RandomTokens, reconstructed for /hf/train.py (the oracle's train_data.py is not shipped): 64 rows of
16 tokens from torch.randint(0, 256, generator=manual_seed(0)), labels = input_ids. Checked against the
fixtures' recorded (first token, token sum) of every micro-batch on both ranks and their losses."""
import torch


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n=64, seq=16, vocab=256, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i].clone()}
