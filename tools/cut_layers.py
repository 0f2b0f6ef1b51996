#!/usr/bin/env python3
"""cut_layers.py - a draft model cut from a trained one: the first N transformer blocks of a GGUF
with its embeddings, final norm, output head and vocabulary kept (the same tokens, so Strata
accepts it as a --draft-model of the original). The blocks after N are left out, <arch>.block_count
says N; every other metadata key and every kept tensor's bytes are copied as they are (no
re-quantization). A draft made this way is untrained past its cut: how often its drafts are
accepted is measured, not assumed (docs/SPECULATIVE.md).

    python3 tools/cut_layers.py models/strata-tiny-moe-q8_0.gguf /tmp/draft-l2.gguf --layers 2

Needs the `gguf` package (pip install gguf)."""
from __future__ import annotations

import argparse
import re
import sys

import numpy as np


def cut(src: str, dst: str, n_keep: int) -> tuple[int, int]:
    import gguf

    r = gguf.GGUFReader(src)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    key = f"{arch}.block_count"
    n_layer = int(r.fields[key].parts[-1][0])
    if not 1 <= n_keep <= n_layer:
        raise SystemExit(f"cut_layers: --layers {n_keep} outside 1..{n_layer} ({src} has {n_layer} blocks)")
    w = gguf.GGUFWriter(dst, arch)
    for name, field in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = field.types[0]
        if name == key:
            w.add_uint32(key, n_keep)
        elif vtype == gguf.GGUFValueType.ARRAY:
            sub = field.types[-1]
            if sub == gguf.GGUFValueType.STRING:
                w.add_array(name, [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape")
                                   for i in field.data])
            else:
                w.add_array(name, [field.parts[i].tolist()[0] for i in field.data])
        elif vtype == gguf.GGUFValueType.STRING:
            w.add_string(name, bytes(field.parts[-1]).decode("utf-8", errors="surrogateescape"))
        else:
            w.add_key_value(name, field.parts[-1].tolist()[0], vtype)
    kept = 0
    for t in r.tensors:
        m = re.match(r"blk\.(\d+)\.", t.name)
        if m and int(m.group(1)) >= n_keep:
            continue
        # the reader's array: elements for F32/F16, bytes (rows x row bytes) for block types,
        # both in the shape the writer takes back with the same raw_dtype
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
        kept += 1
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return n_layer, kept


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="the trained GGUF")
    ap.add_argument("dst", help="the draft GGUF to write")
    ap.add_argument("--layers", type=int, required=True, help="blocks to keep, from the first")
    a = ap.parse_args(argv)
    n_layer, kept = cut(a.src, a.dst, a.layers)
    print(f"cut_layers: {a.dst}: the first {a.layers} of {n_layer} blocks, {kept} tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
