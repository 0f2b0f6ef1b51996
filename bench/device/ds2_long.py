"""ds2_long.py - a deepseek2 file's GPU session against its CPU session on one long prompt (past
the latent attention's 256-position chunks): per-position KL of the next-token distributions and
the greedy agreement, before and after position 512. usage: ds2_long.py FILE [N_TOKENS]"""
import sys

import numpy as np

sys.path.insert(0, "python/tests")
from test_hf_parity_lib import StrataModel  # noqa: E402


def main():
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 900
    with StrataModel(path, n_ctx=1024) as m:
        ids = [int(x) for x in np.random.default_rng(1).integers(0, m.n_vocab, n)]
    rows = {}
    for be in ("cpu", "cuda"):
        with StrataModel(path, n_ctx=1024, kv_type="f16", backend=be) as m:
            rows[be] = m.logits(ids)
    def logp(x):
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    a, b = logp(rows["cpu"]), logp(rows["cuda"])
    kl = (np.exp(a) * (a - b)).sum(axis=1)
    agree = rows["cpu"].argmax(1) == rows["cuda"].argmax(1)
    for lo, hi in ((0, 256), (256, 512), (512, 768), (768, n)):
        print(f"positions {lo}..{hi - 1}: max KL {kl[lo:hi].max():.3g}, greedy agree {agree[lo:hi].mean():.3f}")


if __name__ == "__main__":
    main()
