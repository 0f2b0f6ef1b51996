"""_spec.py - speculative decoding for Model.generate: the drafter (the Model's n-gram one or a
draft model's), --spec auto's draft policy, and one step of it: a verify window of the drafts,
or None when the step should be a plain one (the caller decodes it and reports back)."""
from __future__ import annotations

import time

from ._ffi import check, ffi, lib


class Speculator:
    """One generate() call's drafting state. spec: (source, draft_max, draft_min, auto)."""

    def __init__(self, drafter, spec, own_drafter: bool):
        self.drafter, self.own = drafter, own_drafter
        self.source, self.draft_max, self.draft_min, self.auto = spec
        self.cheap = self.source == "ngram"  # proposals cost nothing: the policy sees them unverified
        self.policy = ffi.NULL
        self.draft = ffi.new("strata_token[]", lib.STRATA_DRAFT_MAX)
        self.out = ffi.new("strata_token[]", lib.STRATA_DRAFT_MAX + 1)
        self.n_out = ffi.new("int32_t *")
        self.n_prop = ffi.new("int32_t *")
        self.draft_tok_s = 0.0
        self.plain = None  # a plain step in flight: (start time, the proposal's first token or -1)

    def start(self, hist) -> None:
        """After the prompt: a draft model reads it (so the first window does not pay for it); the
        draft policy (auto), nothing learnt yet."""
        if not self.cheap and self.source != "self":
            check(lib.strata_drafter_propose(self.drafter, ffi.new("strata_token[]", hist), len(hist), 0,
                                             self.draft, self.n_prop), "strata_drafter_propose")
        if not self.auto:
            return
        out = ffi.new("strata_spec_policy **")
        check(lib.strata_spec_policy_create(self.draft_max, out), "strata_spec_policy_create")
        self.policy = out[0]

    def step(self, sess, smp, hist, room):
        """The tokens after hist (its last token not yet in the cache) from one verify window,
        accepted by the sampler already; or None: the caller makes a plain step and then calls
        plain_done with the token it sampled."""
        max_d = min(self.draft_max, room)
        want = max_d
        if self.policy != ffi.NULL and not self.cheap:
            want = lib.strata_spec_policy_choose(self.policy, max_d, self.draft_tok_s)
        nd = 0
        if want > 0:
            t0 = time.perf_counter()
            check(lib.strata_drafter_propose(self.drafter, ffi.new("strata_token[]", hist), len(hist),
                                             want, self.draft, self.n_prop), "strata_drafter_propose")
            nd = self.n_prop[0]
            if not self.cheap and nd > 0:
                per = (time.perf_counter() - t0) / nd
                self.draft_tok_s = per if self.draft_tok_s == 0 else self.draft_tok_s + 0.25 * (per - self.draft_tok_s)
        if self.policy == ffi.NULL:
            k = nd if nd >= self.draft_min else 0
        else:
            k = lib.strata_spec_policy_choose(self.policy, nd, 0.0) if self.cheap else nd
        if k == 0:
            self.plain = (time.perf_counter(), int(self.draft[0]) if nd > 0 else -1)
            return None
        t0 = time.perf_counter()
        check(lib.strata_session_speculate(sess, smp, hist[-1], self.draft, k, self.out, self.n_out),
              "strata_session_speculate")
        got = [int(self.out[i]) for i in range(self.n_out[0])]
        if self.policy != ffi.NULL:
            j = 0
            while j < k and j < len(got) and got[j] == self.draft[j]:
                j += 1
            lib.strata_spec_policy_observe(self.policy, k, j, time.perf_counter() - t0)
        return got

    def plain_done(self, token: int) -> None:
        """The plain step step() asked for gave token."""
        if self.plain is None or self.policy == ffi.NULL:
            self.plain = None
            return
        t0, first = self.plain
        self.plain = None
        lib.strata_spec_policy_observe(self.policy, 0, 0, time.perf_counter() - t0)
        if first >= 0:
            lib.strata_spec_policy_observe_unverified(self.policy, int(first == token))

    def stats(self) -> dict:
        """The policy's stats as policy_* entries (empty without a policy)."""
        if self.policy == ffi.NULL:
            return {}
        st = ffi.new("strata_spec_policy_stats *")
        check(lib.strata_spec_policy_get_stats(self.policy, st), "strata_spec_policy_get_stats")
        return {"policy_windows": int(st.windows), "policy_probes": int(st.probes),
                "policy_plain_steps": int(st.plain_steps), "policy_acceptance": float(st.acceptance),
                "policy_break_even": float(st.break_even), "policy_choice": int(st.choice),
                "policy_plain_s": float(st.plain_s),
                "policy_window_s": [float(st.window_s[k]) for k in range(st.draft_max + 1)]}

    def close(self) -> None:
        if self.policy != ffi.NULL:
            lib.strata_spec_policy_free(self.policy)
            self.policy = ffi.NULL
        if self.own and self.drafter != ffi.NULL:
            lib.strata_drafter_free(self.drafter)
            self.drafter = ffi.NULL
