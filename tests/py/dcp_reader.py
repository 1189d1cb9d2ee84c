"""An independent reader of DCP checkpoints (spec torch-dcp.md) for the tests: `.metadata` is
unpickled with stand-ins for torch.distributed.checkpoint's classes (Debian's torch 1.13 lacks
some of them), and every item is read back with torch.load from the byte range it names, as
torch's FileSystemReader does. Nothing here comes from zeromount."""
import io
import pickle

import torch


class Obj:
    """A dataclass stand-in: NEWOBJ makes it, BUILD sets its fields."""

    def __init__(self, *args):
        self.args = args

    def __setstate__(self, state):
        if isinstance(state, dict):
            self.__dict__.update(state)
        elif isinstance(state, tuple) and len(state) == 2 and all(s is None or isinstance(s, dict) for s in state):
            for part in state:  # a class with __slots__ (torch's own files): (__dict__, slots)
                self.__dict__.update(part or {})
        else:
            self.state = state


def _stub(name):
    return type(name, (Obj,), {})


class _Index(Obj):
    offset = None  # torch's own files leave it out of a bytes item's state

    def __hash__(self):
        return hash((self.fqn, self.offset))

    def __eq__(self, other):
        return (self.fqn, self.offset) == (other.fqn, other.offset)


CLASSES = {
    ("torch.distributed.checkpoint.metadata", "MetadataIndex"): _Index,
    ("torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING"): lambda v: ("memfmt", v),
    ("torch.serialization", "_get_layout"): lambda name: name,
    ("torch", "Size"): lambda dims: tuple(dims),
    ("pathlib", "PosixPath"): lambda *parts: "/".join(parts),  # storage_meta.checkpoint_id of torch's files
    ("pathlib._local", "PosixPath"): lambda *parts: "/".join(parts),
}


class MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in CLASSES:
            return CLASSES[(module, name)]
        if module == "torch" and hasattr(torch, name) and isinstance(getattr(torch, name), torch.dtype):
            return getattr(torch, name)
        if module.startswith("torch.distributed.checkpoint"):
            return _stub(name)
        raise pickle.UnpicklingError(f"unexpected global {module}.{name}")


def read_metadata(folder):
    with open(f"{folder}/.metadata", "rb") as f:
        return MetadataUnpickler(f).load()


def read_item(folder, info, tensor=True):
    with open(f"{folder}/{info.relative_path}", "rb") as f:
        f.seek(info.offset)
        data = f.read(info.length)
    assert len(data) == info.length, (info.relative_path, info.offset, info.length)
    assert data[:4] == b"PK\x03\x04", "an item is a torch.save archive"
    if tensor:
        return torch.load(io.BytesIO(data), weights_only=True)
    return torch.load(io.BytesIO(data))


def load(folder):
    """Every key of the checkpoint, whole: {fqn: tensor or object}, assembled from its chunks,
    checking that the chunks cover each tensor exactly once."""
    md = read_metadata(folder)
    by_fqn = {}
    for index, info in md.storage_data.items():
        by_fqn.setdefault(index.fqn, []).append((index, info))
    out = {}
    for fqn, meta in md.state_dict_metadata.items():
        pieces = by_fqn[fqn]
        if type(meta).__name__ == "BytesStorageMetadata":
            assert len(pieces) == 1
            out[fqn] = read_item(folder, pieces[0][1], tensor=False)
            continue
        dtype = meta.properties.state[0]
        whole = torch.zeros(meta.size, dtype=dtype)
        covered = torch.zeros(meta.size, dtype=torch.int32)
        assert len(meta.chunks) == len(pieces), fqn
        for index, info in pieces:
            chunk = read_item(folder, info)
            chunk_meta = [c for c in meta.chunks if tuple(c.offsets) == tuple(index.offset)]
            assert len(chunk_meta) == 1, fqn
            sizes = tuple(chunk_meta[0].sizes)
            assert tuple(chunk.shape) == sizes and chunk.dtype == dtype, (fqn, chunk.shape, sizes)
            region = tuple(slice(o, o + s) for o, s in zip(index.offset, sizes))
            whole[region] = chunk
            covered[region] += 1
        assert bool((covered == 1).all()), f"{fqn}: chunks do not cover it exactly once"
        out[fqn] = whole
    return md, out
