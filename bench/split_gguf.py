#!/usr/bin/env python3
"""split_gguf.py - splits a GGUF file into N shards the way llama-gguf-split lays them out, for
testing and timing the tools and loaders that read split models (tools/q8_dense_gguf.py, the
loader's shard checks) on synthetic files: shard 1 keeps every metadata key, each shard has
split.no / split.count / split.tensors.count, the blocks are divided evenly in order (the token
embedding with the first, the output norm and head with the last). Names follow
OUT-0000k-of-0000N.gguf.

usage: split_gguf.py IN.gguf OUT N
"""
import argparse
import sys

import numpy as np
import gguf


def shard_of(name: str, n_block: int, n: int) -> int:
    if name.startswith("blk."):
        return min(n - 1, int(name.split(".")[1]) * n // n_block)
    return 0 if name.startswith("token_embd") else n - 1


def copy_fields(src: gguf.GGUFReader, w: gguf.GGUFWriter):
    for f in src.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name.startswith("split."):
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            strings = f.types[-1] == gguf.GGUFValueType.STRING
            w.add_array(f.name, [f.parts[i].tobytes().decode() if strings else f.parts[i][0].item() for i in f.data])
        elif t == gguf.GGUFValueType.STRING:
            w.add_string(f.name, f.parts[f.data[0]].tobytes().decode())
        else:
            w.add_key_value(f.name, f.parts[f.data[0]][0], t)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src")
    ap.add_argument("out", help="output prefix: OUT-00001-of-0000N.gguf ...")
    ap.add_argument("n", type=int)
    a = ap.parse_args()
    if not 2 <= a.n <= 99:
        sys.exit("split_gguf.py: N must be 2..99")
    src = gguf.GGUFReader(a.src)
    arch = src.fields["general.architecture"].parts[-1].tobytes().decode()
    blocks = [int(t.name.split(".")[1]) for t in src.tensors if t.name.startswith("blk.")]
    n_block = max(blocks) + 1 if blocks else 1
    for k in range(a.n):
        path = f"{a.out}-{k + 1:05d}-of-{a.n:05d}.gguf"
        w = gguf.GGUFWriter(path, arch)
        if k == 0:
            copy_fields(src, w)
        w.add_uint16("split.no", k)
        w.add_uint16("split.count", a.n)
        w.add_int32("split.tensors.count", len(src.tensors))
        for t in src.tensors:
            if shard_of(t.name, n_block, a.n) == k:
                w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
