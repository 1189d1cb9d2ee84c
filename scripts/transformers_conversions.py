#!/usr/bin/env python3
"""Derives data/transformers_conversions.json from transformers' own conversion_mapping.py.

    scripts/transformers_conversions.py PATH/TO/transformers/conversion_mapping.py VERSION > data/transformers_conversions.json

The file is run as it ships, with recording stand-ins for the classes it imports from
core_model_loading (WeightRenaming, PrefixChange, WeightConverter and the operations): what each
entry of _build_checkpoint_conversion_mapping() was built with is written down, nothing is
re-typed by hand. Needs no torch. zeromount interprets the vocabulary WeightRenaming, PrefixChange,
WeightConverter with MergeModulelist, Concatenate, Chunk, Transpose (src/view/files/saved_layout.cpp);
an entry that uses anything else is listed under "outside" with the reason, and served with run-time
names.
"""
import json
import re
import sys
import types

VOCABULARY = {"MergeModulelist", "Concatenate", "Chunk", "Transpose"}


class Op:
    def __init__(self, *args, **kwargs):
        self.args, self.kwargs = args, kwargs

    def record(self):
        out = {"op": type(self).__name__}
        names = {"Transpose": ["dim0", "dim1", "check_dims"]}.get(type(self).__name__, ["dim"])
        for name, value in zip(names, self.args):
            out[name] = value
        out.update(self.kwargs)
        if type(self).__name__ == "Transpose":
            out.setdefault("dim0", 0), out.setdefault("dim1", 1), out.setdefault("check_dims", False)
        elif type(self).__name__ in VOCABULARY:
            out.setdefault("dim", 0)
        return out


def listed(p):
    return [p] if isinstance(p, str) else list(p)


class WeightTransform:
    kind = "WeightTransform"

    def __init__(self, source_patterns=None, target_patterns=None, operations=None, **kw):
        self.source, self.target = listed(source_patterns), listed(target_patterns)
        self.operations = list(operations or [])

    def record(self):
        r = {"kind": self.kind, "source": self.source, "target": self.target}
        if self.kind == "WeightConverter":
            r["operations"] = [o.record() for o in self.operations]
        return r


class WeightRenaming(WeightTransform):
    kind = "WeightRenaming"


class WeightConverter(WeightTransform):
    kind = "WeightConverter"


class PrefixChange(WeightRenaming):
    kind = "PrefixChange"

    def __init__(self, prefix_to_add=None, prefix_to_remove=None, model_prefix=None):
        super().__init__([], [])
        self.add, self.remove, self.model_prefix = prefix_to_add, prefix_to_remove, model_prefix or ""

    def record(self):
        return {"kind": self.kind, "prefix_to_add": self.add, "prefix_to_remove": self.remove,
                "model_prefix": self.model_prefix}


def load(path):
    stand_ins = types.ModuleType("stand_ins")
    for name in ("WeightTransform", "WeightRenaming", "WeightConverter", "PrefixChange"):
        setattr(stand_ins, name, globals()[name])
    src = open(path).read()
    # Every name the file imports from .core_model_loading becomes a stand-in; ops outside the
    # vocabulary are recorded under their own class name.
    imported = re.search(r"from \.core_model_loading import \(([^)]*)\)", src)
    for name in re.findall(r"\w+", imported.group(1)):
        if not hasattr(stand_ins, name):
            setattr(stand_ins, name, type(name, (Op,), {}))
    src = src.replace(imported.group(0), "from stand_ins import *")
    src = re.sub(r"^from \.\S* import .*$", "", src, flags=re.M)
    sys.modules["stand_ins"] = stand_ins
    ns = {"__name__": "conversion_mapping"}
    exec(compile(src, path, "exec"), ns)
    return ns["_build_checkpoint_conversion_mapping"](), ns.get("_MODEL_TO_CONVERSION_PATTERN", {})


def outside(record):
    """Why zeromount cannot serve this entry in the saved layout, or None."""
    for t in record:
        for o in t.get("operations", []):
            if o["op"] not in VOCABULARY:
                return "operation " + o["op"] + " is outside the vocabulary"
            if o["op"] == "Transpose" and o.get("check_dims"):
                return "Transpose(check_dims=True) decides from the live model's parameter shapes"
        for p in t.get("source", []) + t.get("target", []):
            if "(?<" in p:
                return "pattern " + p + " has a lookbehind"
    return None


def main():
    path, version = sys.argv[1], sys.argv[2]
    mapping, aliases = load(path)
    entries, out = {}, {}
    for key in sorted(mapping):
        rec = [t.record() for t in mapping[key]]
        entries[key] = rec
        why = outside(rec)
        if why:
            out[key] = why
    doc = {
        "transformers": version,
        "source": "transformers/conversion_mapping.py, _build_checkpoint_conversion_mapping()",
        "made_by": "scripts/transformers_conversions.py",
        "note": "keys are model types or class names (class names first, as get_model_conversion_mapping "
                "looks them up); 'source' is the saved (on-disk) side, 'target' the run-time side; "
                "'legacy' is applied at load only, never reversed at save",
        "aliases": dict(sorted(aliases.items())),
        "outside": out,
        "mapping": entries,
    }
    json.dump(doc, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
