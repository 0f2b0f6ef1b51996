/* common.c - shared pieces of the model-running subcommands (see common.h): option parsing,
 * model/session setup, timing, JSON output, and the top-K logprob dump and KL estimate. */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------------- */

/* 1 when the environment variable is set to something other than "" or "0". */
static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

void cli_opts_init(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->n_batch = 512;
    o->kv_type = STRATA_TYPE_F16;
    o->gpu = -1;
    /* environment knobs (DEGRADE_ZERO/DEGRADE_TAU keep their historical names); options override */
    o->degrade_eval = env_flag("STRATA_DEGRADE_EVAL");
    o->degrade_zero = env_flag("DEGRADE_ZERO") || o->degrade_eval;
    o->degrade_tau = 0.03f;
    const char *dt = getenv("DEGRADE_TAU");
    if (dt && dt[0]) {
        char *end;
        float t = strtof(dt, &end);
        o->degrade_tau = *end ? -1.0f : t; /* a bad value is refused at session creation */
    }
    o->profile = env_flag("STRATA_PROFILE");
    o->pipe = env_flag("STRATA_PIPE");
    const char *graphs = getenv("STRATA_CUDA_GRAPHS"); /* unset: 1; "2": doorbell steps too */
    o->cuda_graphs = !graphs ? 1 : strcmp(graphs, "2") == 0 ? 2 : env_flag("STRATA_CUDA_GRAPHS");
    {
        const char *v = getenv("STRATA_CUDA_PDL"); /* unset: 1; all or 2: 2; else a flag */
        o->cuda_pdl = !v ? 1 : !strcmp(v, "all") || !strcmp(v, "2") ? 2 : env_flag("STRATA_CUDA_PDL");
    }
    {
        const char *v = getenv("STRATA_ATTN_TC");
        o->attn_tc = v && v[0] ? (strcmp(v, "auto") == 0      ? -1
                                  : strcmp(v, "split") == 0   ? 2
                                  : strcmp(v, "split-p") == 0 ? 3
                                                              : env_flag("STRATA_ATTN_TC"))
                               : -1;
    }
    {
        const char *v = getenv("STRATA_PIN_EXPERTS");
        o->pin_experts = v && v[0] ? (strcmp(v, "auto") == 0 ? -1 : env_flag("STRATA_PIN_EXPERTS")) : -1;
    }
    o->cpu_pin = env_flag("STRATA_CPU_PIN");
    o->no_amx = getenv("STRATA_AMX") && strcmp(getenv("STRATA_AMX"), "0") == 0;
    o->cpu_isa = getenv("STRATA_CPU_ISA") && getenv("STRATA_CPU_ISA")[0] ? getenv("STRATA_CPU_ISA") : NULL;
    o->gpu_prefetch = env_flag("STRATA_GPU_PREFETCH");
    o->cpu_warm = env_flag("STRATA_CPU_WARM");
    o->q8_tiles = !getenv("STRATA_Q8_TILES") || env_flag("STRATA_Q8_TILES"); /* unset: on */
    o->doorbell = env_flag("STRATA_DOORBELL");
    o->cpu_misses = getenv("STRATA_CPU_MISSES") ? env_flag("STRATA_CPU_MISSES") : -1; /* unset: auto */
    o->pcie_frac = getenv("STRATA_PCIE_FRAC") ? (float)atof(getenv("STRATA_PCIE_FRAC")) : -1.0f;
    {
        const char *v = getenv("STRATA_STAGE_EXPERTS");
        o->stage_experts = v && v[0] ? (strcmp(v, "auto") == 0 ? -1 : atoi(v)) : -1; /* checked by the session */
    }
    o->sp = strata_sampler_default_params();
    o->logpos_top = 20;
}

void cli_opts_usage(FILE *f) {
    fprintf(f,
        "  -m, --model FILE        the GGUF model\n"
        "  -p, --prompt TEXT       prompt; -f, --file FILE reads it from a file\n"
        "  -n, --n-predict N       tokens to generate (default 128; -1: until end of generation\n"
        "                          or the context is full; 0: only read the prompt)\n"
        "  -c, --ctx-size N        context length (default: the model's)\n"
        "  -t, --threads N         CPU threads (default: all cores)\n"
        "  --mlock                 keep the model file's pages locked in RAM (an error when\n"
        "                          ulimit -l is too small); --hugepages: ask for transparent\n"
        "                          huge pages on the weights (best effort; with --no-mmap the\n"
        "                          file is read into advised anonymous memory)\n"
        "  --no-mmap               read the model file into memory instead of mapping it\n"
        "  --cpu-pin               bind the threads one per CPU of the affinity set (also\n"
        "                          $STRATA_CPU_PIN=1)\n"
        "  --no-amx                CPU batches of K-quant/Q8_0 weights without the AMX tiles\n"
        "                          (same results; also $STRATA_AMX=0)\n"
        "  --cpu-isa LEVEL         the CPU kernels of scalar, avx2, avx512 or best (default;\n"
        "                          also $STRATA_CPU_ISA): e.g. an AVX2 host's speed on this one;\n"
        "                          above what the CPU has is an error\n"
        "  -b, --batch-size N      prompt tokens per forward pass (default 512)\n"
        "  --kv-type f16|f32       KV cache type (default f16)\n"
        "  --gpu                   every layer on the GPU (fail if CUDA is unusable)\n"
        "  --cpu                   CPU only;  -ngl, --n-gpu-layers N: 0 = --cpu, >= the layer\n"
        "                          count (or 99) = --gpu; default: the GPU when usable, else CPU\n"
        "  --cpu-moe               GPU sessions: every layer's routed experts stay in RAM and\n"
        "                          run on the CPU; --n-cpu-moe N: those of the first N layers;\n"
        "                          --gpu-experts: all on the GPU (default)\n"
        "  --cpu-misses            with --expert-cache: each missed expert is loaded or computed\n"
        "                          by the CPU while the GPU computes the rest, whichever the cost\n"
        "                          model predicts faster (figures measured at start, printed);\n"
        "                          --pcie-frac F: load the heaviest share F of the misses instead\n"
        "                          (also $STRATA_CPU_MISSES=1, $STRATA_PCIE_FRAC). With --cpu-moe /\n"
        "                          --n-cpu-moe, by default where exact: decode steps copy that\n"
        "                          share of a CPU layer's experts to the GPU, which computes them\n"
        "                          in the CPU's arithmetic while the CPU computes the rest: the\n"
        "                          same bits as the CPU alone (Q4_0/Q8_0/Q4_K/Q5_K/Q6_K experts;\n"
        "                          other types only with --cpu-misses, and the bits then follow\n"
        "                          the share); --no-cpu-misses: the CPU computes them all\n"
        "  --gpu-prefetch          with --expert-cache: in decode steps, predict the next layer's\n"
        "                          experts and load the missing ones while this layer computes\n"
        "                          (same results; also $STRATA_GPU_PREFETCH=1)\n"
        "  --cpu-warm, --no-cpu-warm with --cpu-moe/--n-cpu-moe: the CPU threads read the next\n"
        "                          CPU layer's predicted experts into their caches while the GPU\n"
        "                          computes, or not (the default; same results either way;\n"
        "                          measured within noise of the default end to end; also\n"
        "                          $STRATA_CPU_WARM=1)\n"
        "  --doorbell              with --cpu-moe/--n-cpu-moe: decode steps hand the CPU layers\n"
        "                          to a pool of CPU threads through host-mapped memory that the\n"
        "                          GPU writes and waits on, instead of the host waiting for each\n"
        "                          layer (same results; also $STRATA_DOORBELL=1); with\n"
        "                          --expert-cache: that pool computes the cache's misses while\n"
        "                          the GPU computes the hits (the CPU's arithmetic for those)\n"
        "  --pin-experts           GPU sessions with --expert-cache or --cpu-moe/--n-cpu-moe: copy\n"
        "                          the experts kept in RAM into pinned memory at start (PCIe\n"
        "                          loads ~3x faster); default: when the copy leaves 4 GiB of RAM\n"
        "                          available; --no-pin-experts: never (also $STRATA_PIN_EXPERTS=\n"
        "                          1, 0 or auto)\n"
        "  --stage-experts N|auto  with --cpu-moe/--n-cpu-moe: batches of N tokens or more copy a\n"
        "                          CPU layer's routed experts to the GPU and compute them there\n"
        "                          (prompts, as llama.cpp does); auto: per batch, by the cost\n"
        "                          model from PCIe and CPU figures measured at start (printed);\n"
        "                          the default; also $STRATA_STAGE_EXPERTS; 0: off\n"
        "  --expert-cache N|auto   GPU sessions: routed experts in N GPU slots (at least one\n"
        "                          layer's experts), loaded over PCIe when routed (same results);\n"
        "                          auto: what fits in --gpu-mem SIZE or the free memory\n"
        "  --ram-budget SIZE       RAM for routed experts (e.g. 8G); the rest are read from the\n"
        "                          file with O_DIRECT when routed (same results); CPU sessions,\n"
        "                          and GPU sessions with --expert-cache or --cpu-moe /\n"
        "                          --n-cpu-moe (pinned RAM slots the GPU loads from);\n"
        "                          --pipe (also $STRATA_PIPE=1): read the next layer's\n"
        "                          predicted experts while this layer computes (GPU\n"
        "                          sessions: in calls of up to 8 tokens)\n"
        "  --attn-tc, --no-attn-tc GPU: prompt batches' attention on the tensor cores with\n"
        "                          single f16 queries and probabilities (fastest; twice the KL),\n"
        "                          or on the FMA units; default (--attn-tc-split): tensor cores\n"
        "                          with each split into two f16 parts (near-f32; 2.9x the FMA\n"
        "                          kernel at depth 16K); --attn-tc-split-p: the probabilities\n"
        "                          only split (3/4 of the work, +1.8%% at depth 16K, KL near\n"
        "                          single's); also $STRATA_ATTN_TC=1, 0, split, split-p or auto\n"
        "  --q8-tiles, --no-q8-tiles GPU: keep each Q8_0 attention and dense FFN matrix also\n"
        "                          as rows of quants and a scale array, which prompt batches\n"
        "                          copy into shared memory whole (the default; same results;\n"
        "                          those matrices' GPU memory once more, qwen3-30b-a3b 0.96 GB,\n"
        "                          taken last and only where the session's other allocations\n"
        "                          leave room), or not; also $STRATA_Q8_TILES=0\n"
        "  --no-cuda-graphs        GPU: launch every kernel of every decode step instead of\n"
        "                          replaying the step as a CUDA graph (the default, same\n"
        "                          results; also $STRATA_CUDA_GRAPHS=0; --cuda-graphs: on)\n"
        "  --doorbell-graphs       GPU, with --doorbell: replay those decode steps as CUDA\n"
        "                          graphs too (same results; also $STRATA_CUDA_GRAPHS=2)\n"
        "  --no-pdl                GPU (compute 9.0+): launch each kernel after the one before\n"
        "                          has completed, instead of letting it start while that one\n"
        "                          finishes (programmatic dependent launch: by default for\n"
        "                          decode steps and windows of up to 8 tokens, not prompts;\n"
        "                          same results; also $STRATA_CUDA_PDL=0; --pdl: the default;\n"
        "                          --pdl-all or $STRATA_CUDA_PDL=all: prompt batches too)\n"
        "  --degrade-zero          DEGRADE_ZERO approximation (also $DEGRADE_ZERO=1): in decode\n"
        "                          steps, drop a routed expert that missed its deadline when its\n"
        "                          gate weight is below tau; --degrade-tau T (also $DEGRADE_TAU,\n"
        "                          default 0.03); --degrade-eval (also $STRATA_DEGRADE_EVAL=1):\n"
        "                          every slot counts as missed (quality tables; CPU only)\n"
        "  --profile               time the phases of every forward pass (also $STRATA_PROFILE=1;\n"
        "                          on the GPU each phase waits for the device: slower)\n"
        "  --temp T                temperature (default 0.8; <= 0: greedy)\n"
        "  --top-k N               (default 40; 0: off)     --top-p P   (default 0.95; 1: off)\n"
        "  --min-p P               (default 0.05; 0: off)\n"
        "  --repeat-penalty P      (default 1.0: off)       --repeat-last-n N (default 64)\n"
        "  --presence-penalty P    --frequency-penalty P    (default 0)\n"
        "  --seed N                sampler seed (default 0x5eed); the same seed gives the same text;\n"
        "                          -1: a random seed, printed on stderr\n"
        "  --stop TEXT             stop when TEXT appears (repeatable); the output is cut before it\n"
        "  --ignore-eos            do not stop at end-of-generation tokens\n"
        "  --no-bos                never prepend BOS     --no-echo  do not print the prompt\n"
        "  --logpos FILE           teacher-forced logprobs of every prompt position (JSONL; also\n"
        "                          $STRATA_LOGPOS); --logpos-top K ids per position (default 20)\n"
        "  --stats-json FILE       the timing stats as JSON      --quiet  no stats on stderr\n"
        "  -i, --chat              interactive chat; templates: chatml (<|im_start|>role ...\n"
        "                          <|im_end|>) and inst (Llama-2/Mistral [INST] ... [/INST]),\n"
        "                          detected from tokenizer.chat_template, else plain continuation;\n"
        "                          --chat-template chatml|inst|none overrides, --system TEXT\n");
}

/* A byte count: a number, optionally with K, M or G (powers of 1024). */
static int parse_size(const char *name, const char *v, int64_t *out) {
    char *end;
    errno = 0;
    double b = strtod(v, &end);
    double mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1048576.0, end++;
    else if (*end == 'G' || *end == 'g') mul = 1073741824.0, end++;
    if (errno || end == v || *end || !(b >= 0) || b * mul > 9e18)
        return cli_usage_error("bad value '%s' for %s (bytes, or a number with K, M or G)", v, name);
    *out = (int64_t)(b * mul);
    return 0;
}

static int opt_is(const char *a, const char *s, const char *l) {
    return (s && strcmp(a, s) == 0) || (l && strcmp(a, l) == 0);
}

static int parse_long(const char *name, const char *v, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 0);
    if (errno || end == v || *end || x < lo || x > hi)
        return cli_usage_error("bad value '%s' for %s (an integer in %ld..%ld)", v, name, lo, hi);
    *out = x;
    return 0;
}

static int parse_float(const char *name, const char *v, float *out) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x))
        return cli_usage_error("bad value '%s' for %s (a number)", v, name);
    *out = (float)x;
    return 0;
}

/* --cpu-isa's names; 0, or -1 for none of them. */
static int cli_isa_from_name(const char *v, strata_cpu_isa *out) {
    static const struct { const char *name; strata_cpu_isa isa; } t[] = {
        {"scalar", STRATA_ISA_SCALAR}, {"avx2", STRATA_ISA_AVX2}, {"avx512", STRATA_ISA_AVX512}, {"best", STRATA_ISA_BEST}};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
        if (v && strcmp(v, t[k].name) == 0) return *out = t[k].isa, 0;
    return -1;
}

/* The flags that only GPU sessions use: a CPU session names those given in a warning. */
static void cli_note_gpu_only(cli_opts *o, const char *a) {
    static const char *const gpu_only[] = {
        "--cpu-moe", "--n-cpu-moe", "--gpu-experts", "--expert-cache", "--gpu-mem", "--cpu-misses",
        "--no-cpu-misses", "--pcie-frac", "--gpu-prefetch", "--cpu-warm", "--no-cpu-warm",
        "--doorbell", "--doorbell-graphs", "--pin-experts", "--no-pin-experts", "--stage-experts",
        "--attn-tc", "--no-attn-tc", "--attn-tc-split", "--attn-tc-split-p", "--q8-tiles",
        "--no-q8-tiles", "--cuda-graphs", "--no-cuda-graphs", "--pdl", "--no-pdl", "--pdl-all", NULL};
    for (int k = 0; gpu_only[k]; k++) {
        if (strcmp(a, gpu_only[k]) != 0) continue;
        for (int j = 0; j < o->n_gpu_only; j++)
            if (o->gpu_only[j] == gpu_only[k]) return;
        if (o->n_gpu_only < CLI_MAX_GPU_ONLY) o->gpu_only[o->n_gpu_only++] = gpu_only[k];
        return;
    }
}

/* --seed -1: a seed from /dev/urandom (else the clock and the process id), 32 bits as
 * llama.cpp's random seeds, so that it is easy to give back with --seed. */
static uint64_t cli_random_seed(void) {
    uint32_t x = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    const int ok = f && fread(&x, sizeof x, 1, f) == 1;
    if (f) fclose(f);
    if (!ok) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        x = (uint32_t)t.tv_nsec ^ (uint32_t)t.tv_sec ^ ((uint32_t)getpid() << 16);
    }
    return x;
}

int cli_opts_parse(cli_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    const char *v = NULL;
    /* "--name=value" form */
    char name[64];
    const char *eq = (a[0] == '-' && a[1] == '-') ? strchr(a, '=') : NULL;
    if (eq && (size_t)(eq - a) < sizeof name) {
        memcpy(name, a, (size_t)(eq - a));
        name[eq - a] = '\0';
        v = eq + 1;
        a = name;
    }
    cli_note_gpu_only(o, a);
    /* flags */
    int flag = 1;
    if (opt_is(a, NULL, "--ignore-eos")) o->ignore_eos = 1;
    else if (opt_is(a, NULL, "--no-bos")) o->no_bos = 1;
    else if (opt_is(a, NULL, "--no-echo")) o->no_echo = 1;
    else if (opt_is(a, "-i", "--chat") || opt_is(a, NULL, "--interactive")) o->interactive = 1;
    else if (opt_is(a, "-q", "--quiet")) o->quiet = 1;
    else if (opt_is(a, NULL, "--degrade-zero")) o->degrade_zero = 1;
    else if (opt_is(a, NULL, "--degrade-eval")) o->degrade_eval = o->degrade_zero = 1;
    else if (opt_is(a, NULL, "--profile")) o->profile = 1;
    else if (opt_is(a, NULL, "--cuda-graphs")) o->cuda_graphs = 1;
    else if (opt_is(a, NULL, "--no-cuda-graphs")) o->cuda_graphs = 0;
    else if (opt_is(a, NULL, "--doorbell-graphs")) o->cuda_graphs = 2;
    else if (opt_is(a, NULL, "--pdl")) o->cuda_pdl = 1;
    else if (opt_is(a, NULL, "--pdl-all")) o->cuda_pdl = 2;
    else if (opt_is(a, NULL, "--no-pdl")) o->cuda_pdl = 0;
    else if (opt_is(a, NULL, "--attn-tc")) o->attn_tc = 1;
    else if (opt_is(a, NULL, "--no-attn-tc")) o->attn_tc = 0;
    else if (opt_is(a, NULL, "--attn-tc-split")) o->attn_tc = 2;
    else if (opt_is(a, NULL, "--attn-tc-split-p")) o->attn_tc = 3;
    else if (opt_is(a, NULL, "--q8-tiles")) o->q8_tiles = 1;
    else if (opt_is(a, NULL, "--no-q8-tiles")) o->q8_tiles = 0;
    else if (opt_is(a, NULL, "--pin-experts")) o->pin_experts = 1;
    else if (opt_is(a, NULL, "--no-pin-experts")) o->pin_experts = 0;
    else if (opt_is(a, NULL, "--mlock")) o->mlock = 1;
    else if (opt_is(a, NULL, "--hugepages")) o->hugepages = 1;
    else if (opt_is(a, NULL, "--no-mmap")) o->no_mmap = 1;
    else if (opt_is(a, NULL, "--cpu-pin")) o->cpu_pin = 1;
    else if (opt_is(a, NULL, "--no-amx")) o->no_amx = 1;
    else if (opt_is(a, NULL, "--gpu-prefetch")) o->gpu_prefetch = 1;
    else if (opt_is(a, NULL, "--cpu-warm")) o->cpu_warm = 1;
    else if (opt_is(a, NULL, "--no-cpu-warm")) o->cpu_warm = 0;
    else if (opt_is(a, NULL, "--doorbell")) o->doorbell = 1;
    else if (opt_is(a, NULL, "--cpu-misses")) o->cpu_misses = 1;
    else if (opt_is(a, NULL, "--no-cpu-misses")) o->cpu_misses = 0;
    else if (opt_is(a, NULL, "--pipe")) o->pipe = 1;
    else if (opt_is(a, NULL, "--cpu-moe")) o->n_cpu_moe = -1;
    else if (opt_is(a, NULL, "--gpu-experts")) o->n_cpu_moe = 0;
    else if (opt_is(a, NULL, "--gpu")) o->gpu = 1;
    else if (opt_is(a, NULL, "--cpu")) o->gpu = 0;
    else flag = 0;
    if (flag) {
        if (v) return cli_usage_error("option '%s' takes no value", a);
        return 1;
    }
    static const char *const valued[] = {
        "-m", "--model", "-p", "--prompt", "-f", "--file", "-n", "--n-predict", "-c", "--ctx-size",
        "-t", "--threads", "-b", "--batch-size", "--kv-type", "--temp", "--top-k", "--top-p",
        "--min-p", "--repeat-penalty", "--repeat-last-n", "--presence-penalty",
        "--frequency-penalty", "--seed", "--stop", "--logpos", "--logpos-top", "--stats-json",
        "--chat-template", "--system", "--stride", "--kl-base", "--kl", "--temperature", "-ngl",
        "--n-gpu-layers", "--degrade-tau", "--n-cpu-moe", "--stage-experts", "--pcie-frac", "--ram-budget", "--expert-cache",
        "--gpu-mem", "--cpu-isa", NULL};
    int known = 0;
    for (int k = 0; valued[k]; k++) known |= strcmp(a, valued[k]) == 0;
    if (!known) return 0;
    if (!v) {
        if (*i + 1 >= argc) return cli_usage_error("option '%s' needs a value", a);
        v = argv[++*i];
    }
    long x = 0;
    int rc = 0;
    if (opt_is(a, "-m", "--model")) o->model = v;
    else if (opt_is(a, "-p", "--prompt")) o->prompt = v;
    else if (opt_is(a, "-f", "--file")) o->prompt_file = v;
    else if (opt_is(a, "-n", "--n-predict")) {
        if (!(rc = parse_long(a, v, -1, 1L << 30, &x))) o->n_predict = (int)x;
    } else if (opt_is(a, "-c", "--ctx-size")) {
        if (!(rc = parse_long(a, v, 0, 1L << 30, &x))) o->n_ctx = (int)x;
    } else if (opt_is(a, "-t", "--threads")) {
        if (!(rc = parse_long(a, v, 0, 4096, &x))) o->n_threads = (int)x;
    } else if (opt_is(a, "-ngl", "--n-gpu-layers")) {
        if (!(rc = parse_long(a, v, 0, 1L << 20, &x))) o->gpu = x > 0 ? 2 : 0; /* 2: checked later */
        o->ngl = (int)x;
    } else if (opt_is(a, NULL, "--ram-budget")) {
        rc = parse_size(a, v, &o->ram_budget);
    } else if (opt_is(a, NULL, "--expert-cache")) {
        if (strcmp(v, "auto") == 0) o->expert_cache = -1;
        else if (!(rc = parse_long(a, v, 0, 1L << 30, &x))) o->expert_cache = (int)x;
    } else if (opt_is(a, NULL, "--gpu-mem")) {
        rc = parse_size(a, v, &o->gpu_mem);
    } else if (opt_is(a, NULL, "--n-cpu-moe")) {
        if (!(rc = parse_long(a, v, 0, 1L << 20, &x))) o->n_cpu_moe = (int)x;
    } else if (opt_is(a, NULL, "--pcie-frac")) {
        rc = parse_float(a, v, &o->pcie_frac);
        if (!rc && !(o->pcie_frac >= 0.0f && o->pcie_frac <= 1.0f))
            rc = cli_usage_error("bad value '%s' for --pcie-frac (a share in 0..1)", v);
        if (!rc) o->cpu_misses = 1;
    } else if (opt_is(a, NULL, "--stage-experts")) {
        if (strcmp(v, "auto") == 0) o->stage_experts = -1;
        else if (!(rc = parse_long(a, v, 0, 1L << 30, &x))) o->stage_experts = (int)x;
    } else if (opt_is(a, NULL, "--degrade-tau")) {
        rc = parse_float(a, v, &o->degrade_tau);
        if (!rc && !(o->degrade_tau >= 0.0f && o->degrade_tau <= 1.0f))
            rc = cli_usage_error("bad value '%s' for --degrade-tau (0..1)", v);
    } else if (opt_is(a, "-b", "--batch-size")) {
        if (!(rc = parse_long(a, v, 1, 1L << 20, &x))) o->n_batch = (int)x;
    } else if (opt_is(a, NULL, "--cpu-isa")) {
        strata_cpu_isa l;
        if (cli_isa_from_name(v, &l) != 0)
            rc = cli_usage_error("bad value '%s' for --cpu-isa (scalar, avx2, avx512 or best)", v);
        else o->cpu_isa = v;
    } else if (opt_is(a, NULL, "--kv-type")) {
        if (strcmp(v, "f16") == 0) o->kv_type = STRATA_TYPE_F16;
        else if (strcmp(v, "f32") == 0) o->kv_type = STRATA_TYPE_F32;
        else rc = cli_usage_error("bad value '%s' for --kv-type (f16 or f32)", v);
    } else if (opt_is(a, NULL, "--temp") || opt_is(a, NULL, "--temperature")) {
        rc = parse_float(a, v, &o->sp.temperature);
    } else if (opt_is(a, NULL, "--top-k")) {
        if (!(rc = parse_long(a, v, 0, 1L << 30, &x))) o->sp.top_k = (int32_t)x;
    } else if (opt_is(a, NULL, "--top-p")) {
        rc = parse_float(a, v, &o->sp.top_p);
    } else if (opt_is(a, NULL, "--min-p")) {
        rc = parse_float(a, v, &o->sp.min_p);
    } else if (opt_is(a, NULL, "--repeat-penalty")) {
        rc = parse_float(a, v, &o->sp.repeat_penalty);
        if (!rc && !(o->sp.repeat_penalty > 0))
            rc = cli_usage_error("bad value '%s' for --repeat-penalty (> 0)", v);
    } else if (opt_is(a, NULL, "--repeat-last-n")) {
        if (!(rc = parse_long(a, v, 0, 1L << 20, &x))) o->sp.repeat_last_n = (int32_t)x;
    } else if (opt_is(a, NULL, "--presence-penalty")) {
        rc = parse_float(a, v, &o->sp.presence_penalty);
    } else if (opt_is(a, NULL, "--frequency-penalty")) {
        rc = parse_float(a, v, &o->sp.frequency_penalty);
    } else if (opt_is(a, NULL, "--seed")) {
        char *end;
        errno = 0;
        unsigned long long s = strtoull(v, &end, 0);
        o->seed_random = strcmp(v, "-1") == 0; /* llama.cpp's "a random seed" */
        if (o->seed_random) o->sp.seed = cli_random_seed();
        else if (errno || end == v || *end || v[0] == '-')
            rc = cli_usage_error("bad value '%s' for --seed (an unsigned integer, or -1 for a random "
                                 "one)", v);
        else o->sp.seed = (uint64_t)s;
    } else if (opt_is(a, NULL, "--stop")) {
        if (!v[0]) rc = cli_usage_error("--stop needs a non-empty text");
        else if (o->n_stops >= CLI_MAX_STOPS)
            rc = cli_usage_error("at most %d --stop strings", CLI_MAX_STOPS);
        else o->stops[o->n_stops++] = v;
    } else if (opt_is(a, NULL, "--logpos")) o->logpos = v;
    else if (opt_is(a, NULL, "--logpos-top")) {
        if (!(rc = parse_long(a, v, 1, 1000000, &x))) o->logpos_top = (int)x;
    } else if (opt_is(a, NULL, "--stats-json")) o->stats_json = v;
    else if (opt_is(a, NULL, "--chat-template")) {
        if (strcmp(v, "chatml") && strcmp(v, "inst") && strcmp(v, "none"))
            rc = cli_usage_error("bad value '%s' for --chat-template (chatml, inst or none)", v);
        else o->chat_template = v;
    } else if (opt_is(a, NULL, "--system")) o->system = v;
    else if (opt_is(a, NULL, "--stride")) {
        if (!(rc = parse_long(a, v, 1, 1L << 30, &x))) o->stride = (int)x;
    } else if (opt_is(a, NULL, "--kl-base")) o->kl_base = v;
    else if (opt_is(a, NULL, "--kl")) o->kl = v;
    return rc ? rc : 1;
}

/* ---------------------------------------------------------------------------------------------
 * Model, session, tokens, files
 * ------------------------------------------------------------------------------------------- */

int cli_load_model(const cli_opts *o, strata_model **model, double *load_s) {
    if (o->cpu_isa) { /* process-wide, before the model is read and any thread computes */
        strata_cpu_isa l;
        if (cli_isa_from_name(o->cpu_isa, &l) != 0)
            return cli_fail("bad value '%s' for --cpu-isa / $STRATA_CPU_ISA (scalar, avx2, avx512 or best)", o->cpu_isa);
        if (strata_cpu_isa_set(l) != STRATA_OK) return cli_fail("--cpu-isa %s: %s", o->cpu_isa, strata_last_error());
        if (!o->quiet)
            fprintf(stderr, "strata: --cpu-isa: the CPU kernels of the %s level (this CPU has %s)\n",
                    strata_cpu_isa_name(strata_cpu_isa_active()), strata_cpu_isa_name(strata_cpu_isa_supported()));
    }
    int rc = cli_check_readable(o->model);
    if (rc) return rc;
    strata_model_params mp = strata_model_default_params();
    mp.n_threads = o->n_threads;
    mp.mlock = o->mlock;
    mp.hugepages = o->hugepages;
    mp.use_mmap = !o->no_mmap;
    double t0 = cli_now();
    if (strata_model_load(o->model, &mp, model) != STRATA_OK)
        return cli_fail("cannot load '%s': %s", o->model, cli_lib_error());
    if (load_s) *load_s = cli_now() - t0;
    return 0;
}

/* A one-line progress bar on stderr, redrawn in place; cleared when done reaches total. */
static void cli_progress_bar(const char *what, int64_t done, int64_t total, void *ud) {
    (void)ud;
    if (total <= 0) return;
    const int width = 30, fill = (int)(width * (double)done / (double)total);
    char bar[32];
    for (int i = 0; i < width; i++) bar[i] = i < fill ? '=' : ' ';
    bar[width] = '\0';
    if (done >= total) fprintf(stderr, "\r\033[K");
    else if (strcmp(what, "upload") == 0)
        fprintf(stderr, "\rstrata: %s [%s] %.1f / %.1f GiB", what, bar, (double)done / 1073741824.0,
                (double)total / 1073741824.0);
    else
        fprintf(stderr, "\rstrata: %s [%s] %lld / %lld tokens", what, bar, (long long)done, (long long)total);
    fflush(stderr);
}

static int cli_new_session_inner(cli_opts *o, const strata_model *model, strata_session **out);

/* --cpu-pin: the session binds its workers to CPUs 1.. of this thread's affinity set; this
 * thread, which runs as the pool's thread 0, then takes the set's first CPU. */
static void cli_pin_main_thread(const cli_opts *o, strata_session *s) {
    cpu_set_t set;
    strata_session_stats st;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || strata_session_get_stats(s, &st) != STRATA_OK) return;
    int first = -1;
    for (int c = 0; c < CPU_SETSIZE && first < 0; c++)
        if (CPU_ISSET(c, &set)) first = c;
    cpu_set_t one;
    CPU_ZERO(&one);
    if (first >= 0) CPU_SET(first, &one);
    const int ok = first >= 0 && st.threads_pinned > 0 && sched_setaffinity(0, sizeof one, &one) == 0;
    if (!o->quiet)
        fprintf(stderr, "strata: --cpu-pin: %d worker threads bound one per CPU%s\n", (int)st.threads_pinned,
                ok ? ", the main thread to the first" : " (too few CPUs in the affinity set: none bound)");
}

int cli_new_session(cli_opts *o, const strata_model *model, strata_session **out) {
    const int rc = cli_new_session_inner(o, model, out);
    if (rc == 0 && o->cpu_pin && *out) cli_pin_main_thread(o, *out);
    return rc;
}

/* The start-up lines of a GPU session: its expert cache, where the experts kept in RAM are read
 * from, Q8_0 tile copies left out, the cost model's figures, which layers' experts run on the
 * CPU. Nothing with --quiet. */
static void cli_gpu_session_lines(const cli_opts *o, const strata_model_info *mi, const strata_session *s) {
    strata_session_stats cs; /* the start-up lines below read the new session's stats */
    const int have = strata_session_get_stats(s, &cs) == STRATA_OK;
    if (o->quiet) return;
    if (o->expert_cache != 0 && have)
        fprintf(stderr, "strata: GPU expert cache of %d slots (of %lld experts)\n",
                (int)cs.expert_cache_slots, (long long)mi->n_layer * mi->n_expert);
    if ((o->expert_cache != 0 || o->n_cpu_moe != 0) && mi->n_expert > 0 && have) {
        char hb[32];
        cli_human_bytes((double)cs.pinned_bytes, hb, sizeof hb);
        if (o->ram_budget > 0) {
            cli_human_bytes((double)o->ram_budget, hb, sizeof hb);
            fprintf(stderr, "strata: %s of page-locked RAM slots for routed experts; the others are "
                    "read from the file with O_DIRECT when routed\n", hb);
        } else if (cs.pinned_bytes > 0)
            fprintf(stderr, "strata: the experts kept in RAM are read from a pinned copy (%s)\n", hb);
        else
            fprintf(stderr, "strata: the experts kept in RAM are read from the file's mapping%s\n",
                    o->pin_experts < 0 ? " (not enough RAM available for a pinned copy)" : "");
    }
    /* (an expert cache of auto size leaves no room for them by design: said in EXPERTS.md) */
    if (o->q8_tiles && o->expert_cache == 0 && have && cs.q8_tiles_skipped > 0)
        fprintf(stderr, "strata: --q8-tiles: %d Q8_0 matrices without a tile copy (no GPU memory to "
                "spare); their prompt batches read the blocks (same results, slower)\n",
                (int)cs.q8_tiles_skipped);
    if (have && ((o->expert_cache != 0 && o->cpu_misses == 1) || cs.cpu_split != 0))
        fprintf(stderr, "strata: --cpu-misses: PCIe %.1f GB/s (%.0f us a copy), CPU %.0f us + %.0f us "
                "an expert (+ %.0f us a further row); %s%s\n", cs.pcie_bytes_per_s / 1e9,
                cs.pcie_latency_s * 1e6, cs.cpu_share_step_s * 1e6, cs.cpu_share_expert_s * 1e6,
                cs.cpu_expert_per_row_s * 1e6,
                o->pcie_frac < 0 ? "each miss goes where it is predicted to finish first"
                                 : "the heaviest share of --pcie-frac misses is loaded, the rest computed",
                cs.cpu_split == 1 ? "; the CPU layers' GPU share in the CPU's arithmetic (same bits)"
                : cs.cpu_split == 2 ? "; the CPU layers' GPU share in its own arithmetic (bits follow the share)"
                                    : "");
    if (o->n_cpu_moe != 0 && mi->n_expert > 0) {
        if (o->n_cpu_moe < 0 || o->n_cpu_moe >= mi->n_layer)
            fprintf(stderr, "strata: the routed experts of every layer run on the CPU\n");
        else
            fprintf(stderr, "strata: the routed experts of layers 0..%d run on the CPU, the "
                    "rest on the GPU\n", o->n_cpu_moe - 1);
        if (o->stage_experts < 0 && o->expert_cache == 0 && o->ram_budget == 0 && have)
            fprintf(stderr, "strata: --stage-experts auto: PCIe %.1f GB/s (%.0f us a copy), CPU "
                    "%.0f us + %.0f us per row for one expert: each batch of a CPU layer goes "
                    "where it is predicted to finish first\n", cs.pcie_bytes_per_s / 1e9,
                    cs.pcie_latency_s * 1e6, cs.cpu_expert_fixed_s * 1e6, cs.cpu_expert_per_row_s * 1e6);
    }
}

/* A CPU session: why, when the GPU was the default (one line), and the GPU-only flags given,
 * which it ignores (one warning line). */
static void cli_cpu_session_lines(const cli_opts *o, const char *why) {
    if (why && why[0]) fprintf(stderr, "strata: running on the CPU: %s\n", why);
    if (o->n_gpu_only == 0) return;
    fputs("strata: warning: ignored on the CPU (GPU sessions only):", stderr);
    for (int i = 0; i < o->n_gpu_only; i++) fprintf(stderr, "%s %s", i ? "," : "", o->gpu_only[i]);
    fputc('\n', stderr);
}

static void cli_session_params(const cli_opts *o, strata_session_params *sp) {
    *sp = strata_session_default_params();
    if (!o->quiet && isatty(2)) sp->progress = cli_progress_bar; /* off when stderr is not a tty */
    sp->n_ctx = o->n_ctx;
    sp->n_batch = o->n_batch;
    sp->kv_type = o->kv_type;
    sp->n_threads = o->n_threads;
    sp->degrade_zero = o->degrade_zero;
    sp->degrade_tau = o->degrade_tau;
    sp->degrade_eval = o->degrade_eval;
    sp->profile = o->profile;
    sp->cuda.graphs = o->cuda_graphs;
    sp->cuda.pdl = o->cuda_pdl;
    sp->placement.n_cpu_moe = o->n_cpu_moe;
    sp->placement.stage_experts = o->stage_experts;
    sp->cuda.attn_tc = o->attn_tc;
    sp->placement.pin_experts = o->pin_experts;
    sp->cpu_pin = o->cpu_pin;
    sp->placement.gpu_prefetch = o->gpu_prefetch;
    sp->placement.cpu_warm = o->cpu_warm;
    sp->cuda.q8_tiles = o->q8_tiles;
    sp->placement.doorbell = o->doorbell;
    sp->placement.cpu_misses = o->cpu_misses;
    sp->placement.pcie_frac = o->pcie_frac;
    sp->placement.ram_budget = o->ram_budget;
    sp->placement.expert_cache = o->expert_cache;
    sp->placement.gpu_mem = o->gpu_mem;
    sp->placement.pipe = o->pipe;
}

static int cli_new_session_inner(cli_opts *o, const strata_model *model, strata_session **out) {
    if (o->no_amx) strata_cpu_amx_set(0); /* process-wide, before any thread computes */
    strata_session_params sp;
    cli_session_params(o, &sp);
    char why[400] = ""; /* why a session whose backend was left to the CLI runs on the CPU */
    const int chosen = o->gpu == -1;
    /* the RAM tier serves CPU sessions, and GPU sessions whose experts are cached or on the CPU */
    if (o->ram_budget > 0 && o->gpu != 1 && o->expert_cache == 0 && o->n_cpu_moe == 0) {
        o->gpu = 0;
        if (chosen)
            snprintf(why, sizeof why, "--ram-budget without --expert-cache or --cpu-moe / --n-cpu-moe "
                     "is for CPU sessions");
    }
    if (o->degrade_zero)
        fprintf(stderr, "strata: DEGRADE_ZERO on (an approximation): in decode steps a routed expert "
                "that misses its deadline with gate weight < tau %.3g is dropped%s\n",
                (double)o->degrade_tau, o->degrade_eval ? "; evaluation mode: every routed slot "
                "counts as missed (CPU session)" : "");
    if (o->degrade_eval && o->gpu != 1) { /* the evaluation mode runs on the CPU */
        if (o->gpu == -1) snprintf(why, sizeof why, "--degrade-eval runs on CPU sessions only");
        o->gpu = 0;
    }
    strata_model_info mi;
    memset(&mi, 0, sizeof mi);
    strata_model_get_info(model, &mi);
    if (!o->ctx_warned && o->n_ctx > 0 && mi.n_ctx_train > 0 && o->n_ctx > mi.n_ctx_train)
        fprintf(stderr, "strata: warning: -c %d is past the model's training context of %d tokens; "
                "positions past it may give poor output\n", o->n_ctx, (int)mi.n_ctx_train);
    if (o->gpu == 2) { /* -ngl N > 0: all layers or an error (no partial layer offload) */
        if (o->ngl < mi.n_layer && o->ngl != 99)
            return cli_fail("-ngl %d: only 0 (CPU) or all %d layers (or 99) are supported; expert "
                            "placement options come with the expert-offloading release", o->ngl,
                            (int)mi.n_layer);
        o->gpu = 1;
    }
    strata_backend_info bi;
    memset(&bi, 0, sizeof bi);
    strata_backend_query(STRATA_BACKEND_CUDA, &bi);
    if (o->gpu == -1 && !bi.available)
        snprintf(why, sizeof why, "CUDA is not usable: %s", bi.detail[0] ? bi.detail : "no detail");
    if (o->gpu != 0 && (bi.available || o->gpu == 1)) {
        sp.backend = STRATA_BACKEND_CUDA;
        if (strata_session_create(model, &sp, out) == STRATA_OK) {
            snprintf(o->backend_desc, sizeof o->backend_desc, "cuda (%s)", bi.detail);
            cli_gpu_session_lines(o, &mi, *out);
            return 0;
        }
        if (o->gpu == 1) return cli_fail("cannot create a GPU session: %s", cli_lib_error());
        snprintf(why, sizeof why, "%s", strata_last_error()[0] ? cli_lib_error() : "the GPU session failed "
                 "(no reason given)");
        sp.backend = STRATA_BACKEND_CPU;
    }
    if (strata_session_create(model, &sp, out) != STRATA_OK)
        return cli_fail("cannot create a session: %s", cli_lib_error());
    snprintf(o->backend_desc, sizeof o->backend_desc, "cpu");
    cli_cpu_session_lines(o, why);
    return 0;
}

int cli_tokenize(const strata_model *model, const char *text, size_t len, int add_special,
                 int parse_special, strata_token **toks, int64_t *n) {
    int64_t cap = (int64_t)len + 8, need = 0;
    strata_token *buf = malloc((size_t)cap * sizeof *buf);
    if (!buf) return cli_fail("out of memory tokenizing %zu bytes", len);
    strata_status st = strata_tokenize(model, text, (int64_t)len, add_special, parse_special, buf,
                                       cap, &need);
    if (st == STRATA_ERR_RANGE && need > cap) {
        strata_token *b2 = realloc(buf, (size_t)need * sizeof *buf);
        if (!b2) { free(buf); return cli_fail("out of memory for %lld tokens", (long long)need); }
        buf = b2;
        cap = need;
        st = strata_tokenize(model, text, (int64_t)len, add_special, parse_special, buf, cap, &need);
    }
    if (st != STRATA_OK) {
        free(buf);
        return cli_fail("tokenize: %s", strata_last_error());
    }
    *toks = buf;
    *n = need;
    return 0;
}

int cli_model_adds_bos(const strata_model *model) {
    strata_token t[4];
    int64_t n = 0;
    strata_token bos = strata_token_bos(model);
    if (bos < 0) return 0;
    if (strata_tokenize(model, "", 0, 1, 0, t, 4, &n) != STRATA_OK) return 0;
    return n >= 1 && t[0] == bos;
}

/* ---------------------------------------------------------------------------------------------
 * Top-K logprob rows
 * ------------------------------------------------------------------------------------------- */

int cli_topk_init(cli_topk *t, int32_t n_vocab, int k) {
    memset(t, 0, sizeof *t);
    if (k > n_vocab) k = n_vocab;
    t->n_vocab = n_vocab;
    t->k = k;
    t->ids = malloc((size_t)k * sizeof *t->ids);
    t->lp = malloc((size_t)k * sizeof *t->lp);
    if (!t->ids || !t->lp) {
        cli_topk_free(t);
        return cli_fail("out of memory for top-%d rows", k);
    }
    return 0;
}

void cli_topk_free(cli_topk *t) {
    free(t->ids);
    free(t->lp);
    t->ids = NULL;
    t->lp = NULL;
}

void cli_topk_row(cli_topk *t, const float *logits) {
    int32_t V = t->n_vocab;
    int k = t->k, n = 0;
    double mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    t->lse = mx + log(sum);
    /* insertion into a descending list of k; strict '>' keeps the lower id first on ties */
    for (int32_t i = 0; i < V; i++) {
        double l = logits[i];
        if (n == k && !(l > t->lp[k - 1])) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && l > t->lp[j - 1]) {
            t->lp[j] = t->lp[j - 1];
            t->ids[j] = t->ids[j - 1];
            j--;
        }
        t->lp[j] = l;
        t->ids[j] = i;
    }
    for (int j = 0; j < n; j++) t->lp[j] -= t->lse;
}

void cli_logpos_header(FILE *f, const char *model, int32_t n_vocab, int k, const char *extra) {
    fputs("{\"strata_logpos\": 1, \"model\": ", f);
    cli_json_string(f, model ? model : "");
    fprintf(f, ", \"n_vocab\": %d, \"top_k\": %d%s}\n", (int)n_vocab, k, extra ? extra : "");
}

void cli_logpos_line(FILE *f, int64_t pos, int64_t next, const cli_topk *t) {
    fprintf(f, "{\"pos\": %lld, \"token\": ", (long long)pos);
    if (next < 0) fputs("null", f);
    else fprintf(f, "%lld", (long long)next);
    fputs(", \"top\": [", f);
    for (int j = 0; j < t->k; j++)
        fprintf(f, "%s[%d, %.9g]", j ? ", " : "", (int)t->ids[j], t->lp[j]);
    fputs("]}\n", f);
}

double cli_kl_topk(const double *lp_a, const double *lp_b, int k) {
    double kl = 0.0, sa = 0.0, sb = 0.0;
    for (int i = 0; i < k; i++) {
        double a = exp(lp_a[i]), b = exp(lp_b[i]);
        sa += a;
        sb += b;
        if (a > 0.0) kl += a * (lp_a[i] - lp_b[i]);
    }
    double ra = 1.0 - sa, rb = 1.0 - sb;
    if (ra > 1e-12) kl += ra * (log(ra) - log(rb > 1e-300 ? rb : 1e-300));
    return kl < 0.0 ? 0.0 : kl;
}

void cli_print_degrade_stats(const strata_session *sess) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || !st.degrade_zero) return;
    fprintf(stderr, "strata: DEGRADE_ZERO tau %.3g%s: zeroed %lld of %lld decode slots (%.2f%%), "
            "per layer %.2f%%..%.2f%%\n", (double)st.degrade_tau, st.degrade_eval ? " (eval)" : "",
            (long long)st.degrade_zeroed, (long long)st.degrade_slots,
            st.degrade_slots ? 100.0 * (double)st.degrade_zeroed / (double)st.degrade_slots : 0.0,
            100.0 * st.degrade_layer_min, 100.0 * st.degrade_layer_max);
}

void cli_print_profile(const strata_session *sess, const char *what) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK || !st.profile || st.forward_tokens == 0)
        return;
    double tot = 0;
    for (int i = 0; i < STRATA_PHASE_COUNT; i++) tot += st.phase_seconds[i];
    fprintf(stderr, "strata: profile %s (%lld passes, %lld tokens, %.3f ms/token):", what,
            (long long)st.forward_calls, (long long)st.forward_tokens,
            1e3 * tot / (double)st.forward_tokens);
    for (int i = 0; i < STRATA_PHASE_COUNT; i++)
        fprintf(stderr, " %s %.3f (%.0f%%)", strata_phase_name((strata_phase)i),
                1e3 * st.phase_seconds[i] / (double)st.forward_tokens,
                tot > 0 ? 100.0 * st.phase_seconds[i] / tot : 0.0);
    fputc('\n', stderr);
    if (st.predict_slots > 0)
        fprintf(stderr, "strata: profile %s: next-layer experts predicted at the previous layer's "
                "router: %.1f%% of %lld routed slots\n", what,
                100.0 * (double)st.predict_hits / (double)st.predict_slots, (long long)st.predict_slots);
}

int cli_threads_used(const cli_opts *o) {
    if (o->n_threads > 0) return o->n_threads;
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* The [PROF] line of a CPU session: no GPU memory, GPU share, PCIe or hand-off fields. */
static void cli_print_prof_line_cpu(const strata_session_stats *st, double prompt_tps, double decode_tps) {
    char db[32];
    fprintf(stderr, "[PROF] prompt %.2f tok/s | decode %.2f tok/s | experts: %lld slot-rows on the CPU",
            prompt_tps, decode_tps, (long long)st->expert_slots_cpu);
    if (st->expert_cache_slots > 0)
        fprintf(stderr, " | RAM slots %d: %lld hits, %lld misses (per-layer hit rate %.0f%%..%.0f%%) | "
                "prefetch %lld: %lld timely, %lld late", (int)st->expert_cache_slots,
                (long long)st->expert_cache_hits, (long long)st->expert_cache_misses,
                100.0 * st->layer_hit_rate_min, 100.0 * st->layer_hit_rate_max,
                (long long)st->prefetch_issued, (long long)st->prefetch_timely, (long long)st->prefetch_late);
    fprintf(stderr, " | disk %s | zeroed %lld\n", cli_human_bytes((double)st->disk_bytes, db, sizeof db),
            (long long)st->degrade_zeroed);
}

void cli_print_prof_line(const strata_session *sess, int gpu, double prompt_tps, double decode_tps) {
    strata_session_stats st;
    if (!sess || strata_session_get_stats(sess, &st) != STRATA_OK) return;
    if (!gpu) {
        cli_print_prof_line_cpu(&st, prompt_tps, decode_tps);
        return;
    }
    char pb[32], db[32];
    fprintf(stderr, "[PROF] prompt %.2f tok/s | decode %.2f tok/s | experts: %lld slot-rows from GPU "
            "memory, %lld on the CPU", prompt_tps, decode_tps, (long long)st.expert_slots_gpu,
            (long long)st.expert_slots_cpu);
    if (st.expert_slots_gpu + st.expert_slots_cpu > 0)
        fprintf(stderr, " (per-layer GPU share %.0f%%..%.0f%%)", 100.0 * st.layer_gpu_share_min,
                100.0 * st.layer_gpu_share_max);
    if (st.expert_cache_slots > 0)
        fprintf(stderr, " | %s slots %d: %lld hits, %lld misses (per-layer hit rate %.0f%%..%.0f%%) | "
                "prefetch %lld: %lld timely, %lld late", st.expert_slots_gpu > 0 ? "GPU" : "RAM",
                (int)st.expert_cache_slots,
                (long long)st.expert_cache_hits, (long long)st.expert_cache_misses,
                100.0 * st.layer_hit_rate_min, 100.0 * st.layer_hit_rate_max,
                (long long)st.prefetch_issued, (long long)st.prefetch_timely, (long long)st.prefetch_late);
    else
        fprintf(stderr, " | no cache, no prefetch");
    if (st.cpu_warm_bytes > 0)
        fprintf(stderr, " | CPU warm %s (next-layer prediction %.0f%% right)",
                cli_human_bytes((double)st.cpu_warm_bytes, pb, sizeof pb),
                st.predict_slots ? 100.0 * (double)st.predict_hits / (double)st.predict_slots : 0.0);
    if (st.cpu_hand_offs > 0)
        fprintf(stderr, " | %lld CPU hand-offs: %.1f us waited + %.1f us computed each", (long long)st.cpu_hand_offs,
                1e6 * st.cpu_hand_wait_s / (double)st.cpu_hand_offs, 1e6 * st.cpu_step_s / (double)st.cpu_hand_offs);
    if (st.cpu_split)
        fprintf(stderr, " | CPU layers' decode split, the GPU's share in %s", st.cpu_split == 1
                ? "the CPU's arithmetic (the CPU-only bits)" : "its own arithmetic (bits follow the share)");
    fprintf(stderr, " | PCIe %s | disk %s | zeroed %lld\n",
            cli_human_bytes((double)st.pcie_bytes, pb, sizeof pb),
            cli_human_bytes((double)st.disk_bytes, db, sizeof db), (long long)st.degrade_zeroed);
}
