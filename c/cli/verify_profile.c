/* verify_profile.c - the verify profile (verify_profile.h): the session's phase timers and host
 * hand-off wait read before and after each pass, grouped by window length. */
#include "verify_profile.h"

#include "cli.h"

#include <string.h>

static const char *const VP_NAMES[CLI_VP_COUNT] = {"draft", "attention", "dense", "router", "experts",
                                                   "wait CPU experts", "output", "acceptance"};
static const char *const VP_KEYS[CLI_VP_COUNT] = {"draft", "attention", "dense", "router", "experts",
                                                  "wait_cpu_experts", "output", "acceptance"};

void cli_vp_begin(cli_verify_profile *vp, const strata_session *s) {
    memset(&vp->before, 0, sizeof vp->before);
    strata_session_get_stats(s, &vp->before);
    vp->t0 = cli_now();
}

void cli_vp_end(cli_verify_profile *vp, const strata_session *s, int32_t k, int32_t tokens, double draft_s) {
    const double wall = cli_now() - vp->t0;
    strata_session_stats a;
    memset(&a, 0, sizeof a);
    if (k < 0 || k > STRATA_DRAFT_MAX || strata_session_get_stats(s, &a) != STRATA_OK) return;
    const strata_session_stats *b = &vp->before;
    double ph[STRATA_PHASE_COUNT], fwd = 0.0;
    for (int i = 0; i < STRATA_PHASE_COUNT; i++) {
        ph[i] = a.phase_seconds[i] - b->phase_seconds[i];
        fwd += ph[i];
    }
    /* the host's wait for CPU layers' batches falls inside the experts phase */
    const double wait = a.cpu_hand_wait_s - b->cpu_hand_wait_s;
    cli_vp_row *r = &vp->rows[k];
    r->n++;
    r->tokens += tokens;
    r->s[CLI_VP_DRAFT] += draft_s;
    r->s[CLI_VP_ATTN] += ph[STRATA_PHASE_QKV] + ph[STRATA_PHASE_ATTN] + ph[STRATA_PHASE_ATTN_OUT];
    r->s[CLI_VP_DENSE] += ph[STRATA_PHASE_EMBED] + ph[STRATA_PHASE_SHARED];
    r->s[CLI_VP_ROUTER] += ph[STRATA_PHASE_ROUTER];
    r->s[CLI_VP_EXPERTS] += ph[STRATA_PHASE_EXPERTS] > wait ? ph[STRATA_PHASE_EXPERTS] - wait : 0.0;
    r->s[CLI_VP_WAIT] += wait < ph[STRATA_PHASE_EXPERTS] ? wait : ph[STRATA_PHASE_EXPERTS];
    r->s[CLI_VP_OUTPUT] += ph[STRATA_PHASE_OUTPUT];
    r->s[CLI_VP_ACCEPT] += wall > fwd ? wall - fwd : 0.0;
}

static void vp_line(FILE *f, const char *label, const cli_vp_row *r) {
    double tot = 0.0;
    for (int i = 0; i < CLI_VP_COUNT; i++) tot += r->s[i];
    fprintf(f, "| %s | %lld | %.2f |", label, (long long)r->n, (double)r->tokens / (double)r->n);
    for (int i = 0; i < CLI_VP_COUNT; i++) fprintf(f, " %.3f |", 1e3 * r->s[i] / (double)r->n);
    fprintf(f, " %.3f | %.3f |\n", 1e3 * tot / (double)r->n, r->tokens ? 1e3 * tot / (double)r->tokens : 0.0);
}

void cli_vp_print(const cli_verify_profile *vp, FILE *f) {
    cli_vp_row all;
    memset(&all, 0, sizeof all);
    fprintf(f, "strata: verify profile (ms a window by part; the forward phases from --profile's timers):\n"
            "| drafts | windows | tokens/window |");
    for (int i = 0; i < CLI_VP_COUNT; i++) fprintf(f, " %s |", VP_NAMES[i]);
    fprintf(f, " total | ms/token |\n|---|---:|---:|");
    for (int i = 0; i < CLI_VP_COUNT + 2; i++) fprintf(f, "---:|");
    fputc('\n', f);
    for (int k = 0; k <= STRATA_DRAFT_MAX; k++) {
        const cli_vp_row *r = &vp->rows[k];
        if (r->n == 0) continue;
        char label[16];
        snprintf(label, sizeof label, k ? "%d" : "plain", k);
        vp_line(f, label, r);
        all.n += r->n;
        all.tokens += r->tokens;
        for (int i = 0; i < CLI_VP_COUNT; i++) all.s[i] += r->s[i];
    }
    if (all.n) vp_line(f, "all", &all);
    else fprintf(f, "| (no windows or steps) |\n");
}

void cli_vp_json(const cli_verify_profile *vp, FILE *f) {
    int first = 1;
    fputc('[', f);
    for (int k = 0; k <= STRATA_DRAFT_MAX; k++) {
        const cli_vp_row *r = &vp->rows[k];
        if (r->n == 0) continue;
        fprintf(f, "%s{\"drafts\": %d, \"windows\": %lld, \"tokens\": %lld, \"ms\": {", first ? "" : ", ", k,
                (long long)r->n, (long long)r->tokens);
        for (int i = 0; i < CLI_VP_COUNT; i++)
            fprintf(f, "%s\"%s\": %.6f", i ? ", " : "", VP_KEYS[i], 1e3 * r->s[i] / (double)r->n);
        fputs("}}", f);
        first = 0;
    }
    fputc(']', f);
}
