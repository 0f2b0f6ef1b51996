/* flags.c - the library's parameter names and the CLI flags that set them. The library serves
 * Python and other callers too, so its messages name parameters (expert_cache, n_cpu_moe, ...);
 * when the CLI reports a library error it writes each named parameter's flag after it, as in
 * "ram_budget (--ram-budget) with a CUDA session needs expert_cache (--expert-cache) ...". */
#include "cli.h"

#include <ctype.h>
#include <string.h>

static const struct {
    const char *param, *flag;
} cli_param_flags[] = {
    {"allow_requantize", "--allow-requantize"},
    {"attn_tc", "--attn-tc"},
    {"cpu_misses", "--cpu-misses"},
    {"cpu_pin", "--cpu-pin"},
    {"cache_admit", "--cache-admit"},
    {"stage_ahead", "--stage-ahead"},
    {"stage_split", "--stage-split"},
    {"cpu_warm", "--cpu-warm"},
    {"doorbell", "--doorbell"},
    {"graphs", "--cuda-graphs"},
    {"pdl", "--pdl"},
    {"peer_device", "--peer-device"},
    {"pipeline_windows", "--pipeline-windows"},
    {"degrade_eval", "--degrade-eval"},
    {"degrade_tau", "--degrade-tau"},
    {"degrade_zero", "--degrade-zero"},
    {"expert_cache", "--expert-cache"},
    {"expert_cache_device1", "--expert-cache-device1"},
    {"expert_cache_device2", "--expert-cache-device2"},
    {"expert_cache_device3", "--expert-cache-device3"},
    {"expert_cache_device4", "--expert-cache-device4"},
    {"expert_cache_device5", "--expert-cache-device5"},
    {"expert_cache_device6", "--expert-cache-device6"},
    {"expert_cache_device7", "--expert-cache-device7"},
    {"gpu_mem", "--gpu-mem"},
    {"gpu_prefetch", "--gpu-prefetch"},
    {"hugepages", "--hugepages"},
    {"kv_type", "--kv-type"},
    {"layer_split", "--layer-split"},
    {"mlock", "--mlock"},
    {"n_batch", "-b"},
    {"n_cpu_moe", "--cpu-moe, --n-cpu-moe"},
    {"n_ctx", "-c"},
    {"n_threads", "-t"},
    {"pcie_frac", "--pcie-frac"},
    {"pin_experts", "--pin-experts"},
    {"pool_pcie", "--pool-pcie"},
    {"pipe", "--pipe"},
    {"iq_stage_tables", "--iq-stage-tables"},
    {"q8_sm60", "--q8-sm60"},
    {"q8_sm60_bps", "--q8-sm60-bps"},
    {"q8_tiles", "--q8-tiles"},
    {"ram_budget", "--ram-budget"},
    {"split_device", "--split-device"},
    {"stage_experts", "--stage-experts"},
    {"use_mmap", "--no-mmap"},
};
#define CLI_N_PARAM_FLAGS (sizeof cli_param_flags / sizeof cli_param_flags[0])

const char *cli_param_flag(const char *param, size_t len) {
    for (size_t k = 0; k < CLI_N_PARAM_FLAGS; k++)
        if (strlen(cli_param_flags[k].param) == len && memcmp(cli_param_flags[k].param, param, len) == 0)
            return cli_param_flags[k].flag;
    return NULL;
}

static int ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* Appends len bytes of s to buf (n used of size), truncating. */
static void append(char *buf, size_t size, size_t *n, const char *s, size_t len) {
    if (*n + 1 >= size) return;
    if (len > size - 1 - *n) len = size - 1 - *n;
    memcpy(buf + *n, s, len);
    *n += len;
    buf[*n] = '\0';
}

const char *cli_flag_message(const char *msg, char *buf, size_t size) {
    size_t n = 0;
    unsigned char done[CLI_N_PARAM_FLAGS] = {0};
    int quoted = 0; /* inside '...' (a path, a tensor name): left alone */
    if (size == 0) return "";
    buf[0] = '\0';
    msg = msg ? msg : "";
    for (const char *p = msg; *p;) {
        if (*p == '\'' && (quoted || p == msg || !ident_char(p[-1]))) quoted = !quoted;
        if (!ident_char(*p) || quoted) {
            append(buf, size, &n, p++, 1);
            continue;
        }
        size_t len = 0;
        while (ident_char(p[len])) len++;
        append(buf, size, &n, p, len);
        const char *flag = cli_param_flag(p, len);
        size_t k = 0;
        while (flag && cli_param_flags[k].flag != flag) k++;
        if (flag && !done[k]) { /* the first mention of each parameter */
            done[k] = 1;
            append(buf, size, &n, " (", 2);
            append(buf, size, &n, flag, strlen(flag));
            append(buf, size, &n, ")", 1);
        }
        p += len;
    }
    return buf;
}

const char *cli_lib_error(void) {
    static char buf[2048];
    return cli_flag_message(strata_last_error(), buf, sizeof buf);
}
