"""ds2_long.py - a deepseek2 file's GPU session against its CPU session on one long prompt (past
the latent attention's 256-position chunks): per-position KL of the next-token distributions and
the greedy agreement, before and after position 512; then STEPS more tokens decoded one at a time
(teacher-forced; the GPU's decode-step kernels: the joined q / latent projection and the fused
attention inputs), their KL and agreement. usage: ds2_long.py FILE [N_TOKENS [STEPS]]"""
import sys

import numpy as np

sys.path.insert(0, "python/tests")
from test_hf_parity_lib import StrataModel  # noqa: E402


def main():
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 900
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    with StrataModel(path, n_ctx=1024) as m:
        ids = [int(x) for x in np.random.default_rng(1).integers(0, m.n_vocab, n + steps)]
    rows, step_rows = {}, {}
    for be in ("cpu", "cuda"):
        with StrataModel(path, n_ctx=1024, kv_type="f16", backend=be) as m:
            rows[be] = m.logits(ids[:n])
            step_rows[be] = np.array([m.decode([t], True)[0].astype(np.float64) for t in ids[n:]])
    def logp(x):
        x = x - x.max(axis=1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    def compare(c, g):
        a, b = logp(c), logp(g)
        return (np.exp(a) * (a - b)).sum(axis=1), c.argmax(1) == g.argmax(1)
    kl, agree = compare(rows["cpu"], rows["cuda"])
    for lo, hi in ((0, 256), (256, 512), (512, 768), (768, n)):
        if lo < min(hi, n):
            print(f"positions {lo}..{min(hi, n) - 1}: max KL {kl[lo:hi].max():.3g}, "
                  f"greedy agree {agree[lo:hi].mean():.3f}")
    if steps:
        kl, agree = compare(step_rows["cpu"], step_rows["cuda"])
        print(f"decode steps {n}..{n + steps - 1}: max KL {kl.max():.3g}, mean {kl.mean():.3g}, "
              f"greedy agree {agree.mean():.3f}")


if __name__ == "__main__":
    main()
