"""_spec.py - speculative decoding for Model.generate: the drafters of one call (the Model's n-gram
one, a draft model's, the self-draft), and one step of it: a verify window of one drafter's drafts,
or None when the step should be a plain one (the caller decodes it and reports back). Under "auto"
each drafter has a draft policy of its own, as the CLI's --spec auto (c/cli/drafts.c): every policy
learns the window costs from every step, the window comes from the drafter expected fastest."""
from __future__ import annotations

import time

from ._ffi import check, ffi, lib


class Source:
    """One drafter of a call. cheap: its proposals cost nothing (made every step); reads_prompt: a
    draft model, which reads the prompt before the first window; own: freed by close()."""

    def __init__(self, name: str, drafter, own: bool, cheap: bool, reads_prompt: bool = False):
        self.name, self.drafter, self.own, self.cheap, self.reads_prompt = name, drafter, own, cheap, reads_prompt
        self.policy = ffi.NULL
        self.draft = ffi.new("strata_token[]", lib.STRATA_DRAFT_MAX)
        self.n_prop = ffi.new("int32_t *")
        self.nd = 0
        self.tok_s = 0.0  # seconds a drafted token takes (costly drafters, running mean)
        self.read = 0  # a draft model: the history it has read
        self.catchup_s = 0.0  # and the seconds a token of catching up on it takes
        self.windows = self.drafted = self.accepted = 0

    def catch_up(self, hist_c, n_hist: int) -> None:
        """A draft model reads hist[0..n_hist) (a proposal of nothing), its seconds a token learnt."""
        pending = n_hist - self.read
        t0 = time.perf_counter()
        check(lib.strata_drafter_propose(self.drafter, hist_c, n_hist, 0, self.draft, self.n_prop),
              "strata_drafter_propose")
        if pending > 0:
            per = (time.perf_counter() - t0) / pending
            self.catchup_s = per if self.catchup_s == 0 else self.catchup_s + 0.25 * (per - self.catchup_s)
        self.read = n_hist

    def rate_behind(self, k: int, rate: float, pending: int) -> float:
        """c/cli/drafts.c's drafts_rate_behind: the rate with the catching up on pending tokens
        counted, 0 for a probe whose catching up costs more than 2% of a plain step a token."""
        plain_rate = lib.strata_spec_policy_rate(self.policy, 0, 0.0)  # 1 / plain_s
        if not self.reads_prompt or pending <= 0 or rate <= 0 or plain_rate <= 0:
            return rate
        # the catching up as more seconds a drafted token: the policy's own rate then counts it
        behind = lib.strata_spec_policy_rate(self.policy, k, self.tok_s + pending * self.catchup_s / k)
        probe = behind <= 1.02 * plain_rate
        return 0.0 if probe and self.catchup_s * plain_rate > 0.02 else behind

    def propose(self, hist_c, n_hist: int, want: int) -> None:
        if self.reads_prompt and n_hist - self.read > 1:  # the catching up timed apart
            self.catch_up(hist_c, n_hist)
        t0 = time.perf_counter()
        check(lib.strata_drafter_propose(self.drafter, hist_c, n_hist, want, self.draft, self.n_prop),
              "strata_drafter_propose")
        self.nd = self.n_prop[0]
        if not self.cheap and self.nd > 0:
            per = (time.perf_counter() - t0) / self.nd
            self.tok_s = per if self.tok_s == 0 else self.tok_s + 0.25 * (per - self.tok_s)
        if self.reads_prompt:
            self.read = n_hist

    def close(self) -> None:
        if self.policy != ffi.NULL:
            lib.strata_spec_policy_free(self.policy)
            self.policy = ffi.NULL
        if self.own and self.drafter != ffi.NULL:
            lib.strata_drafter_free(self.drafter)
            self.drafter = ffi.NULL


class Speculator:
    """One generate() call's drafting state: sources (Source, at least one), draft_max, draft_min
    (without the policy) and auto (a policy per source)."""

    def __init__(self, sources: list, draft_max: int, draft_min: int, auto: bool):
        self.sources, self.draft_max, self.draft_min, self.auto = sources, draft_max, draft_min, auto
        self.out = ffi.new("strata_token[]", lib.STRATA_DRAFT_MAX + 1)
        self.n_out = ffi.new("int32_t *")
        self.plain = None  # a plain step in flight: its start time

    def start(self, hist) -> None:
        """After the prompt: a draft model reads it (so the first window does not pay for it); the
        draft policies (auto), nothing learnt yet."""
        for s in self.sources:
            if s.reads_prompt:
                s.catch_up(ffi.new("strata_token[]", hist), len(hist))
            if self.auto and s.policy == ffi.NULL:
                out = ffi.new("strata_spec_policy **")
                check(lib.strata_spec_policy_create(self.draft_max, out), "strata_spec_policy_create")
                s.policy = out[0]

    def _choose(self, hist_c, n_hist: int, max_d: int):
        """(source, k): the window to verify, k == 0 for a plain step."""
        if not self.auto:
            s = self.sources[0]
            s.propose(hist_c, n_hist, max_d)
            return s, (s.nd if s.nd >= self.draft_min else 0)
        best, best_k, best_rate = None, 0, 0.0
        for s in self.sources:
            if s.cheap:
                s.propose(hist_c, n_hist, max_d)
                k = lib.strata_spec_policy_choose(s.policy, s.nd, 0.0)
            else:
                k = lib.strata_spec_policy_choose(s.policy, max_d, s.tok_s)
            rate = lib.strata_spec_policy_rate(s.policy, k, 0.0 if s.cheap else s.tok_s) if k > 0 else 0.0
            if k > 0 and not s.cheap:
                rate = s.rate_behind(k, rate, n_hist - s.read)
            if k > 0 and rate > 0 and (best is None or rate > best_rate):
                best, best_k, best_rate = s, k, rate
        if best is not None and not best.cheap:
            best.propose(hist_c, n_hist, best_k)
            best_k = best.nd
        return best, best_k

    def step(self, sess, smp, hist, room):
        """The tokens after hist (its last token not yet in the cache) from one verify window,
        accepted by the sampler already; or None: the caller makes a plain step and then calls
        plain_done with the token it sampled."""
        for s in self.sources:
            s.nd = 0
        hist_c = ffi.new("strata_token[]", hist)
        src, k = self._choose(hist_c, len(hist), min(self.draft_max, room))
        if k == 0:
            self.plain = time.perf_counter()
            return None
        t0 = time.perf_counter()
        check(lib.strata_session_speculate(sess, smp, hist[-1], src.draft, k, self.out, self.n_out),
              "strata_session_speculate")
        dt = time.perf_counter() - t0
        got = [int(self.out[i]) for i in range(self.n_out[0])]
        j = 0
        while j < k and j < len(got) and got[j] == src.draft[j]:
            j += 1
        src.windows += 1
        src.drafted += j + (j < k)
        src.accepted += j
        if self.auto:
            for s in self.sources:
                if s is src:
                    lib.strata_spec_policy_observe(s.policy, k, j, dt)
                    continue
                lib.strata_spec_policy_observe_cost(s.policy, k, dt)
                if s.nd > 0 and got:
                    lib.strata_spec_policy_observe_unverified(s.policy, int(s.draft[0] == got[0]))
        return got

    def plain_done(self, token: int) -> None:
        """The plain step step() asked for gave token."""
        if self.plain is None or not self.auto:
            self.plain = None
            return
        dt = time.perf_counter() - self.plain
        self.plain = None
        for s in self.sources:
            lib.strata_spec_policy_observe(s.policy, 0, 0, dt)
            if s.nd > 0:
                lib.strata_spec_policy_observe_unverified(s.policy, int(s.draft[0] == token))

    def stats(self) -> dict:
        """Per drafter ("drafters": name, windows, drafted, accepted, describe: the library's line
        on it, and under auto its
        acceptance estimate and probes), and the policies' policy_* entries (the first drafter's
        estimate and costs, every drafter's windows and probes)."""
        out = {"drafters": []}
        first, windows, probes = None, 0, 0
        for s in self.sources:
            d = {"name": s.name, "windows": s.windows, "drafted": s.drafted, "accepted": s.accepted,
                 "describe": ffi.string(lib.strata_drafter_describe(s.drafter)).decode()}
            if s.policy != ffi.NULL:
                st = ffi.new("strata_spec_policy_stats *")
                check(lib.strata_spec_policy_get_stats(s.policy, st), "strata_spec_policy_get_stats")
                d["acceptance_estimate"], d["probes"] = float(st.acceptance), int(st.probes)
                windows, probes = windows + int(st.windows), probes + int(st.probes)
                first = first or st
            out["drafters"].append(d)
        if first is not None:
            out.update({"policy_windows": windows, "policy_probes": probes,
                        "policy_plain_steps": int(first.plain_steps), "policy_acceptance": float(first.acceptance),
                        "policy_break_even": float(first.break_even), "policy_choice": int(first.choice),
                        "policy_plain_s": float(first.plain_s),
                        "policy_window_s": [float(first.window_s[k]) for k in range(first.draft_max + 1)]})
        return out

    def close(self) -> None:
        for s in self.sources:
            s.close()
