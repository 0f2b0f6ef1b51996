/* options.c - the option set of the model-running commands (options.h): its defaults, with the
 * environment knobs that options override; the parser, where each option is one row of a table
 * (flags without a value, options with a string, integer or float value) or, when its value
 * needs more than a range check, a row naming its own function; the GPU-only flags given, for
 * the CPU session's warning; and the help text. */
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Defaults and the environment
 * ------------------------------------------------------------------------------------------- */

/* 1 when the environment variable is set to something other than "" or "0". */
static int env_flag(const char *name) {
    const char *v = getenv(name);
    return v && v[0] && strcmp(v, "0") != 0;
}

/* offsetof(cli_opts, field), checked at compile time to be of the given type. */
#define CLI_FIELD(type, field) (offsetof(cli_opts, field) + CLI_TYPE_CHECK(type, ((cli_opts *)0)->field))

/* The environment knobs that are plain flags: on when set to something other than "" or "0". */
static const struct {
    const char *env;
    size_t field; /* offsetof in cli_opts, an int */
} cli_env_flags[] = {
#define CLI_ENV_FLAG(env, field) {env, CLI_FIELD(int, field)}
    CLI_ENV_FLAG("STRATA_PROFILE", profile),
    CLI_ENV_FLAG("STRATA_PIPE", pipe),
    CLI_ENV_FLAG("STRATA_CPU_PIN", cpu_pin),
    CLI_ENV_FLAG("STRATA_GPU_PREFETCH", gpu_prefetch),
    CLI_ENV_FLAG("STRATA_CPU_WARM", cpu_warm),
    CLI_ENV_FLAG("STRATA_CACHE_ADMIT", cache_admit),
    CLI_ENV_FLAG("STRATA_STAGE_AHEAD", stage_ahead),
    CLI_ENV_FLAG("STRATA_STAGE_SPLIT", stage_split),
    CLI_ENV_FLAG("STRATA_DOORBELL", doorbell),
    CLI_ENV_FLAG("STRATA_VERIFY_PROFILE", verify_profile),
#undef CLI_ENV_FLAG
};

/* The environment knobs whose value is more than a flag: words (auto, split, all), numbers, and
 * defaults that are on when the variable is unset. */
static void cli_opts_env(cli_opts *o) {
    /* DEGRADE_ZERO/DEGRADE_TAU keep their historical names; the evaluation mode implies it */
    o->degrade_eval = env_flag("STRATA_DEGRADE_EVAL");
    o->degrade_zero = env_flag("DEGRADE_ZERO") || o->degrade_eval;
    o->degrade_tau = 0.03f;
    const char *dt = getenv("DEGRADE_TAU");
    if (dt && dt[0]) {
        char *end;
        float t = strtof(dt, &end);
        o->degrade_tau = *end ? -1.0f : t; /* a bad value is refused at session creation */
    }
    const char *rts = getenv("STRATA_ROUTE_TAIL_SKIP");
    if (rts && rts[0]) {
        char *end;
        const float v = strtof(rts, &end);
        o->route_tail_skip = *end ? -1.0f : v; /* a bad value is refused at session creation */
    }
    const char *graphs = getenv("STRATA_CUDA_GRAPHS"); /* unset: 1; "2": doorbell steps too */
    o->cuda_graphs = !graphs ? 1 : strcmp(graphs, "2") == 0 ? 2 : env_flag("STRATA_CUDA_GRAPHS");
    const char *pdl = getenv("STRATA_CUDA_PDL"); /* unset: 1; all or 2: 2; else a flag */
    o->cuda_pdl = !pdl ? 1 : !strcmp(pdl, "all") || !strcmp(pdl, "2") ? 2 : env_flag("STRATA_CUDA_PDL");
    const char *tc = getenv("STRATA_ATTN_TC"); /* unset or auto: -1; split: 2; split-p: 3 */
    o->attn_tc = tc && tc[0] ? (strcmp(tc, "auto") == 0      ? -1
                                : strcmp(tc, "split") == 0   ? 2
                                : strcmp(tc, "split-p") == 0 ? 3
                                                             : env_flag("STRATA_ATTN_TC"))
                             : -1;
    const char *pin = getenv("STRATA_PIN_EXPERTS"); /* unset or auto: -1 */
    o->pin_experts = pin && pin[0] ? (strcmp(pin, "auto") == 0 ? -1 : env_flag("STRATA_PIN_EXPERTS")) : -1;
    o->no_amx = getenv("STRATA_AMX") && strcmp(getenv("STRATA_AMX"), "0") == 0;
    o->cpu_isa = getenv("STRATA_CPU_ISA") && getenv("STRATA_CPU_ISA")[0] ? getenv("STRATA_CPU_ISA") : NULL;
    o->route_trace = getenv("STRATA_ROUTE_TRACE") && getenv("STRATA_ROUTE_TRACE")[0] ? getenv("STRATA_ROUTE_TRACE") : NULL;
    o->route_replay = getenv("STRATA_ROUTE_REPLAY") && getenv("STRATA_ROUTE_REPLAY")[0] ? getenv("STRATA_ROUTE_REPLAY")
                                                                                      : NULL;
    o->q8_tiles = !getenv("STRATA_Q8_TILES") || env_flag("STRATA_Q8_TILES"); /* unset: on */
    const char *iqs = getenv("STRATA_IQ_STAGE_TABLES"); /* unset, empty or auto: -1 */
    o->iq_stage_tables = iqs && iqs[0] && strcmp(iqs, "auto") != 0 ? env_flag("STRATA_IQ_STAGE_TABLES") : -1;
    o->q8_sm60 = env_flag("STRATA_Q8_SM60");
    o->q8_sm60_bps = getenv("STRATA_Q8_SM60_BPS") ? atoi(getenv("STRATA_Q8_SM60_BPS")) : 0; /* 0: 4 */
    o->cpu_misses = getenv("STRATA_CPU_MISSES") ? env_flag("STRATA_CPU_MISSES") : -1; /* unset: auto */
    o->pcie_frac = getenv("STRATA_PCIE_FRAC") ? (float)atof(getenv("STRATA_PCIE_FRAC")) : -1.0f;
    /* issue 32's knobs: unset or 0 off, 1, check; BELOW: unset or empty 0.1, a bad value 0.1 (the
     * start-up lines say which) */
    const char *dc = getenv("STRATA_VERIFY_DEFER_CPU");
    o->defer_text = dc && dc[0] ? dc : "0";
    o->defer_cpu = dc && dc[0] ? (strcmp(dc, "check") == 0 ? 2 : env_flag("STRATA_VERIFY_DEFER_CPU")) : 0;
    o->defer_below = 0.1f;
    const char *db = getenv("STRATA_VERIFY_DEFER_CPU_BELOW");
    if (db && db[0]) {
        char *end;
        const float w = strtof(db, &end);
        o->defer_below_text = db;
        o->defer_below_given = 1;
        if (*end || !(w > 0.0f)) o->defer_below_bad = 1;
        else o->defer_below = w;
    }
    const char *stage = getenv("STRATA_STAGE_EXPERTS"); /* unset or auto: -1; checked by the session */
    o->stage_experts = stage && stage[0] ? (strcmp(stage, "auto") == 0 ? -1 : atoi(stage)) : -1;
    const char *zc = getenv("STRATA_POOL_PCIE"); /* unset: 0; auto: -1; checked by the session */
    o->pool_pcie = zc && zc[0] ? (strcmp(zc, "auto") == 0 ? -1 : atoi(zc)) : 0;
}

void cli_opts_init(cli_opts *o) {
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->n_batch = 512;
    o->kv_type = STRATA_TYPE_F16;
    o->gpu = -1;
    for (size_t k = 0; k < sizeof cli_env_flags / sizeof cli_env_flags[0]; k++)
        *(int *)((char *)o + cli_env_flags[k].field) = env_flag(cli_env_flags[k].env);
    cli_opts_env(o); /* options given later override */
    o->sp = strata_sampler_default_params();
    o->logpos_top = 20;
    o->draft_max = 8;
    o->oracle_rate = -1.0f;
    o->split = strata_session_default_params().split;
}

/* ---------------------------------------------------------------------------------------------
 * Help text
 * ------------------------------------------------------------------------------------------- */

/* The options of the model, threads, memory and backend. */
static void cli_usage_model(FILE *f) {
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
        "                          count (or 99) = --gpu; default: the GPU when usable, else CPU\n");
}

/* The options of where routed experts live and run. */
static void cli_usage_experts(FILE *f) {
    fprintf(f,
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
        "  --cache-admit           with --expert-cache and --doorbell or --cpu-misses: a miss\n"
        "                          takes a slot from a resident expert only when it has been\n"
        "                          looked up at least as often; the CPU computes the others\n"
        "                          (--no-cache-admit: every load may evict; $STRATA_CACHE_ADMIT=1)\n"
        "  --pool-pcie N|auto      with --expert-cache and --doorbell: the GPU computes up to N of\n"
        "                          a step's missed experts a layer itself, reading them from the\n"
        "                          pinned copy over PCIe, while the pool computes the rest; auto:\n"
        "                          the count the cost model predicts to finish first (default 0:\n"
        "                          the pool computes every miss; $STRATA_POOL_PCIE)\n"
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
        "  --stage-ahead           with staging: the next CPU layer's experts are copied to the\n"
        "                          GPU while a staged layer computes (same results; also\n"
        "                          $STRATA_STAGE_AHEAD=1)\n"
        "  --defer-cpu 0|1|check   with --doorbell and CPU layers (an approximation): a CPU layer's\n"
        "                          expert rows of routing weight below --defer-cpu-below W (default\n"
        "                          0.1; >= 1: every row) join the residual before the next layer's\n"
        "                          FFN, its attention running meanwhile; check: on time, summed in\n"
        "                          that order ($STRATA_VERIFY_DEFER_CPU, _BELOW; docs/DEFERRAL.md)\n"
        "  --stage-split           with staging: a prompt batch of a CPU layer that is not staged\n"
        "                          whole is split by the cost model: its heaviest experts copied\n"
        "                          to the GPU and computed there while the CPU computes the rest\n"
        "                          (the GPU's share in its arithmetic; $STRATA_STAGE_SPLIT=1)\n"
        "  --expert-cache N|auto   GPU sessions: routed experts in N GPU slots (at least one\n"
        "                          layer's experts), loaded over PCIe when routed (same results);\n"
        "                          auto: what fits in --gpu-mem SIZE or the free memory\n"
        "  --gpu-mem SIZE          GPU sessions: the GPU memory the session may use (e.g. 24G);\n"
        "                          alone, the static split that fits: the first layers' routed\n"
        "                          experts stay in RAM for the CPU (as --n-cpu-moe N), said at\n"
        "                          start-up with the decode rate the CPU layers allow\n"
        "  --ram-budget SIZE       RAM for routed experts (e.g. 8G); the rest are read from the\n"
        "                          file with O_DIRECT when routed (same results); CPU sessions,\n"
        "                          and GPU sessions with --expert-cache or --cpu-moe /\n"
        "                          --n-cpu-moe (pinned RAM slots the GPU loads from);\n"
        "                          --pipe (also $STRATA_PIPE=1): read the next layer's\n"
        "                          predicted experts while this layer computes (GPU\n"
        "                          sessions: in calls of up to 8 tokens)\n");
}

/* The options of several GPUs in one host (docs/MULTI_GPU.md). */
static void cli_usage_split(FILE *f) {
    fprintf(f,
        "  --layer-split A,B,...   GPU sessions: stages of A, B, ... consecutive layers (summing\n"
        "                          to the model's), each on its own device with its layers'\n"
        "                          weights and KV cache; the same results as one GPU; with\n"
        "                          --cpu-moe/--n-cpu-moe the first layers' experts on the CPU\n"
        "                          (not with --expert-cache or --doorbell yet)\n"
        "  --split auto            the stages' layers in proportion to each device's free memory\n"
        "                          (one stage per device, or per --split-device entry)\n"
        "  --split-device D0,D1,...  each stage's CUDA device (default 0,1,...); a device may\n"
        "                          repeat: --layer-split 12,12 --split-device 0,0 runs a split\n"
        "                          on one card (same bits, no gain: a test)\n"
        "  --pipeline-windows      pipeline verify windows over the stages (needs two distinct\n"
        "                          devices; not built yet)\n"
        "  --peer-device N         routed experts on device N over NCCL (needs libnccl.so.2;\n"
        "                          not built yet)\n"
        "  --expert-cache-deviceI N|auto  stage I's expert cache (I = 1..7; stage 0's is\n"
        "                          --expert-cache, which each stage not named scales by its\n"
        "                          MoE layers, or auto)\n");
}

/* The options of GPU kernel choices, DEGRADE_ZERO, --profile. */
static void cli_usage_kernels(FILE *f) {
    fprintf(f,
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
        "  --iq-stage-tables on|off|auto GPU: the grouped expert kernels copy the IQ3 codebooks\n"
        "                          and sign masks into shared memory first (same results);\n"
        "                          auto (default): on for compute capability 6.0 only; also\n"
        "                          $STRATA_IQ_STAGE_TABLES=1 or 0\n"
        "  --q8-sm60               GPU, an approximation for cards without a fast dp4a (Pascal\n"
        "                          GP100): the decode GEMV of those Q8_0 matrices and of a Q8_0\n"
        "                          output head by a kernel over their packed copies (made even\n"
        "                          with --no-q8-tiles, the head's too); not the usual kernels'\n"
        "                          bits (docs/OLDER_GPUS.md); also $STRATA_Q8_SM60=1\n"
        "  --q8-sm60-bps N         with --q8-sm60: its persistent blocks per SM, 1..32 (default\n"
        "                          4); also $STRATA_Q8_SM60_BPS\n"
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
        "  --route-tail-skip P     an approximation: each token's lightest routed experts are\n"
        "                          skipped while their routing weights sum to at most P (0 < P <\n"
        "                          1; never the heaviest; also $STRATA_ROUTE_TAIL_SKIP)\n"
        "  --degrade-zero          DEGRADE_ZERO approximation (also $DEGRADE_ZERO=1): in decode\n"
        "                          steps, drop a routed expert that missed its deadline when its\n"
        "                          gate weight is below tau; --degrade-tau T (also $DEGRADE_TAU,\n"
        "                          default 0.03); --degrade-eval (also $STRATA_DEGRADE_EVAL=1):\n"
        "                          every slot counts as missed (quality tables; CPU only)\n"
        "  --profile               time the phases of every forward pass (also $STRATA_PROFILE=1;\n"
        "                          on the GPU each phase waits for the device: slower)\n");
}

/* The options of sampling, output, dumps and chat. */
static void cli_usage_sampling(FILE *f) {
    fprintf(f,
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
        "  --spec MODE             speculative decoding: drafted tokens verified in windows of one\n"
        "                          forward pass (the same text, greedy or sampled with the\n"
        "                          same seed); ngram: continuations found earlier in the text;\n"
        "                          draft: --draft-model FILE (the same vocabulary) drafts them;\n"
        "                          self: the model itself with only the experts its fast tier\n"
        "                          holds, misses dropped (--expert-cache on the GPU, --ram-budget\n"
        "                          on the CPU); mtp: the model's MTP layer (deepseek2, glm4moe\n"
        "                          and qwen3next files with nextn layers, run on the CPU);\n"
        "                          auto: either (the draft model if given), the draft policy\n"
        "                          choosing each window's length from the acceptance seen and\n"
        "                          windows' measured cost, plain steps when windows do not pay;\n"
        "                          none (default). --draft-max N drafts a window (default 8),\n"
        "                          --draft-min N fewer make a plain step (default 0).\n"
        "                          Benchmarks only: oracle drafts the model's own continuation\n"
        "                          (computed first), each token right with probability\n"
        "                          --oracle-rate P (default 1); with --spec auto, P sets the\n"
        "                          oracle as auto's drafter\n"
        "  --verify-profile        with --spec: a table at exit of each window length's time by\n"
        "                          phase (draft, attention, dense, router, experts, waiting for\n"
        "                          CPU experts, output, acceptance) and tokens a window (also\n"
        "                          $STRATA_VERIFY_PROFILE=1; implies --profile's phase timing)\n"
        "  --short-read N          prompts of up to N tokens are read as verify windows of\n"
        "                          --draft-max + 1 tokens (the decode path: --logpos then\n"
        "                          measures it, approximations included)\n"
        "  --route-trace FILE      each layer's routing (experts, weights, the previous layer's\n"
        "                          prediction) as JSON lines (also $STRATA_ROUTE_TRACE; CPU\n"
        "                          sessions): bench/routing_stats.py reads it\n"
        "  --route-replay FILE     benchmarks only: every MoE layer's routing replaced by a recorded\n"
        "                          one (bench/routing_stats.py TRACE --replay-out FILE; also\n"
        "                          $STRATA_ROUTE_REPLAY): the output is not the model's\n"
        "  -i, --chat              interactive chat, each turn the conversation (--system TEXT,\n"
        "                          the user and assistant turns) rendered by the model's own\n"
        "                          tokenizer.chat_template (Jinja, as strata serve renders it); the\n"
        "                          part the cache already holds is not read again\n"
        "  --chat-template T       auto (default: the model's template; where it has none or it\n"
        "                          fails, chatml or inst if it looks like one, else none, said on\n"
        "                          stderr), model (its template or an error), chatml\n"
        "                          (<|im_start|>role ... <|im_end|>), inst (Llama-2/Mistral [INST]\n"
        "                          ... [/INST]) or none (plain continuation)\n"
        "  --chat-template-file F  a Jinja chat template file instead of the model's\n"
        "  --chat-log FILE         each chat turn as a JSON line: the text tokenized, the cached\n"
        "                          tokens kept, the token ids read, the answer\n");
}

void cli_opts_usage(FILE *f) {
    cli_usage_model(f);
    cli_usage_experts(f);
    cli_usage_split(f);
    cli_usage_kernels(f);
    cli_usage_sampling(f);
}

/* ---------------------------------------------------------------------------------------------
 * Values
 * ------------------------------------------------------------------------------------------- */

int cli_parse_size(const char *name, const char *v, int64_t *out) {
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

int cli_cpu_isa_from_name(const char *v, strata_cpu_isa *out) {
    static const struct { const char *name; strata_cpu_isa isa; } t[] = {
        {"scalar", STRATA_ISA_SCALAR}, {"avx2", STRATA_ISA_AVX2}, {"avx512", STRATA_ISA_AVX512}, {"best", STRATA_ISA_BEST}};
    for (size_t k = 0; k < sizeof t / sizeof t[0]; k++)
        if (v && strcmp(v, t[k].name) == 0) return *out = t[k].isa, 0;
    return -1;
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

/* ---------------------------------------------------------------------------------------------
 * Options whose value needs more than a range check: one function each, a = the option as given
 * ------------------------------------------------------------------------------------------- */

static int opt_ngl(cli_opts *o, const char *a, const char *v) {
    long x = 0;
    int rc = parse_long(a, v, 0, 1L << 20, &x);
    if (!rc) o->gpu = x > 0 ? 2 : 0; /* 2: checked against the layer count later */
    o->ngl = (int)x;
    return rc;
}

static int opt_ram_budget(cli_opts *o, const char *a, const char *v) { return cli_parse_size(a, v, &o->ram_budget); }

static int opt_gpu_mem(cli_opts *o, const char *a, const char *v) { return cli_parse_size(a, v, &o->gpu_mem); }

/* A comma-separated list of up to STRATA_MAX_STAGES integers in lo..hi: its count, or -1 after
 * the usage message. */
static int parse_list(const char *a, const char *v, long lo, int32_t *out) {
    int n = 0;
    for (const char *p = v;; n++) {
        char *end;
        errno = 0;
        const long x = strtol(p, &end, 10);
        if (errno || end == p || (*end && *end != ',') || x < lo || x > 1L << 20) {
            cli_usage_error("bad value '%s' for %s (comma-separated integers >= %ld, e.g. 12,12)", v, a, lo);
            return -1;
        }
        if (n == STRATA_MAX_STAGES) {
            cli_usage_error("%s '%s': more than %d stages", a, v, STRATA_MAX_STAGES);
            return -1;
        }
        out[n] = (int32_t)x;
        if (!*end) return n + 1;
        p = end + 1;
    }
}

/* --layer-split and --split-device name the same stages: their counts must agree. */
static int split_counts_agree(const cli_opts *o) {
    if (o->split.n_stages > 0 && !o->split.auto_layers && o->split_devices_n > 0 &&
        o->split_devices_n != o->split.n_stages)
        return cli_usage_error("--layer-split names %d stages, --split-device %d", (int)o->split.n_stages,
                               o->split_devices_n);
    return 0;
}

static int opt_layer_split(cli_opts *o, const char *a, const char *v) {
    if (o->split.auto_layers) return cli_usage_error("--layer-split with --split auto: give one of them");
    const int n = parse_list(a, v, 1, o->split.layers);
    if (n < 0) return CLI_EXIT_USAGE;
    o->split.n_stages = n;
    return split_counts_agree(o);
}

static int opt_split(cli_opts *o, const char *a, const char *v) {
    if (strcmp(v, "auto") != 0)
        return cli_usage_error("bad value '%s' for %s (auto: layers by each device's free memory; or "
                               "--layer-split A,B,...)", v, a);
    if (o->split.n_stages > 0 && o->split_devices_n == 0)
        return cli_usage_error("--split auto with --layer-split: give one of them");
    o->split.auto_layers = 1;
    o->split.n_stages = o->split_devices_n; /* 0: one stage per device */
    return 0;
}

static int opt_split_device(cli_opts *o, const char *a, const char *v) {
    const int n = parse_list(a, v, 0, o->split.device);
    if (n < 0) return CLI_EXIT_USAGE;
    o->split_devices_n = n;
    if (o->split.auto_layers || o->split.n_stages == 0) o->split.n_stages = n;
    return split_counts_agree(o);
}

static int opt_peer_device(cli_opts *o, const char *a, const char *v) {
    long x = 0;
    const int rc = parse_long(a, v, -1, 1L << 20, &x);
    if (!rc) o->split.peer_device = (int32_t)x;
    return rc;
}

/* --expert-cache-deviceI N|auto: stage I's expert cache (I = 1 .. STRATA_MAX_STAGES - 1). */
static int opt_expert_cache_dev(cli_opts *o, const char *a, const char *v) {
    const int i = a[strlen(a) - 1] - '0';
    long x = -1;
    const int rc = strcmp(v, "auto") == 0 ? 0 : parse_long(a, v, 0, 1L << 30, &x);
    if (!rc) o->split.expert_cache[i] = (int32_t)x;
    return rc;
}

static int opt_pcie_frac(cli_opts *o, const char *a, const char *v) {
    int rc = parse_float(a, v, &o->pcie_frac);
    if (!rc && !(o->pcie_frac >= 0.0f && o->pcie_frac <= 1.0f))
        rc = cli_usage_error("bad value '%s' for --pcie-frac (a share in 0..1)", v);
    if (!rc) o->cpu_misses = 1; /* a share of the misses implies --cpu-misses */
    return rc;
}

static int opt_defer_cpu(cli_opts *o, const char *a, const char *v) {
    (void)a;
    if (strcmp(v, "0") && strcmp(v, "1") && strcmp(v, "check"))
        return cli_usage_error("bad value '%s' for --defer-cpu (0, 1 or check)", v);
    o->defer_cpu = strcmp(v, "check") == 0 ? 2 : v[0] - '0';
    o->defer_text = v;
    return 0;
}

static int opt_defer_below(cli_opts *o, const char *a, const char *v) {
    int rc = parse_float(a, v, &o->defer_below);
    if (!rc && !(o->defer_below > 0.0f))
        rc = cli_usage_error("bad value '%s' for --defer-cpu-below (a routing weight above 0; >= 1: every row)", v);
    o->defer_below_given = 1;
    o->defer_below_bad = 0;
    o->defer_below_text = v;
    return rc;
}

static int opt_degrade_tau(cli_opts *o, const char *a, const char *v) {
    int rc = parse_float(a, v, &o->degrade_tau);
    if (!rc && !(o->degrade_tau >= 0.0f && o->degrade_tau <= 1.0f))
        rc = cli_usage_error("bad value '%s' for --degrade-tau (0..1)", v);
    return rc;
}

static int opt_iq_stage_tables(cli_opts *o, const char *a, const char *v) {
    (void)a;
    if (strcmp(v, "on") == 0 || strcmp(v, "1") == 0) o->iq_stage_tables = 1;
    else if (strcmp(v, "off") == 0 || strcmp(v, "0") == 0) o->iq_stage_tables = 0;
    else if (strcmp(v, "auto") == 0) o->iq_stage_tables = -1;
    else return cli_usage_error("bad value '%s' for --iq-stage-tables (on, off or auto)", v);
    return 0;
}

static int opt_route_tail_skip(cli_opts *o, const char *a, const char *v) {
    int rc = parse_float(a, v, &o->route_tail_skip);
    if (!rc && !(o->route_tail_skip >= 0.0f && o->route_tail_skip < 1.0f))
        rc = cli_usage_error("bad value '%s' for --route-tail-skip (0 off, up to below 1)", v);
    return rc;
}

static int opt_repeat_penalty(cli_opts *o, const char *a, const char *v) {
    int rc = parse_float(a, v, &o->sp.repeat_penalty);
    if (!rc && !(o->sp.repeat_penalty > 0))
        rc = cli_usage_error("bad value '%s' for --repeat-penalty (> 0)", v);
    return rc;
}

static int opt_cpu_isa(cli_opts *o, const char *a, const char *v) {
    (void)a;
    strata_cpu_isa l;
    if (cli_cpu_isa_from_name(v, &l) != 0)
        return cli_usage_error("bad value '%s' for --cpu-isa (scalar, avx2, avx512 or best)", v);
    o->cpu_isa = v;
    return 0;
}

static int opt_kv_type(cli_opts *o, const char *a, const char *v) {
    (void)a;
    if (strcmp(v, "f16") == 0) o->kv_type = STRATA_TYPE_F16;
    else if (strcmp(v, "f32") == 0) o->kv_type = STRATA_TYPE_F32;
    else return cli_usage_error("bad value '%s' for --kv-type (f16 or f32)", v);
    return 0;
}

static int opt_spec(cli_opts *o, const char *a, const char *v) {
    (void)a;
    if (strcmp(v, "none") == 0) o->spec = CLI_SPEC_NONE;
    else if (strcmp(v, "ngram") == 0) o->spec = CLI_SPEC_NGRAM;
    else if (strcmp(v, "draft") == 0) o->spec = CLI_SPEC_DRAFT;
    else if (strcmp(v, "auto") == 0) o->spec = CLI_SPEC_AUTO;
    else if (strcmp(v, "oracle") == 0) o->spec = CLI_SPEC_ORACLE;
    else if (strcmp(v, "self") == 0) o->spec = CLI_SPEC_SELF;
    else if (strcmp(v, "mtp") == 0) o->spec = CLI_SPEC_MTP;
    else return cli_usage_error("bad value '%s' for --spec (none, ngram, draft, self, mtp, auto or oracle)", v);
    return 0;
}

static int opt_oracle_rate(cli_opts *o, const char *a, const char *v) {
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0.0 && x <= 1.0))
        return cli_usage_error("bad value '%s' for %s (a share of right drafts, 0..1)", v, a);
    o->oracle_rate = (float)x;
    return 0;
}

static int opt_draft_model(cli_opts *o, const char *a, const char *v) {
    (void)a;
    o->draft_model = v;
    if (o->spec == CLI_SPEC_NONE) o->spec = CLI_SPEC_DRAFT;
    return 0;
}

static int opt_seed(cli_opts *o, const char *a, const char *v) {
    (void)a;
    char *end;
    errno = 0;
    unsigned long long s = strtoull(v, &end, 0);
    o->seed_random = strcmp(v, "-1") == 0; /* llama.cpp's "a random seed" */
    if (o->seed_random) o->sp.seed = cli_random_seed();
    else if (errno || end == v || *end || v[0] == '-')
        return cli_usage_error("bad value '%s' for --seed (an unsigned integer, or -1 for a random "
                               "one)", v);
    else o->sp.seed = (uint64_t)s;
    return 0;
}

static int opt_stop(cli_opts *o, const char *a, const char *v) {
    (void)a;
    if (!v[0]) return cli_usage_error("--stop needs a non-empty text");
    if (o->n_stops >= CLI_MAX_STOPS) return cli_usage_error("at most %d --stop strings", CLI_MAX_STOPS);
    o->stops[o->n_stops++] = v;
    return 0;
}

static int opt_chat_template(cli_opts *o, const char *a, const char *v) {
    (void)a;
    if (strcmp(v, "auto") && strcmp(v, "model") && strcmp(v, "chatml") && strcmp(v, "inst") && strcmp(v, "none"))
        return cli_usage_error("bad value '%s' for --chat-template (auto, model, chatml, inst or none)", v);
    o->chat_template = v;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The option tables
 * ------------------------------------------------------------------------------------------- */

/* Flags (no value): each row sets an int field to a value; a flag may have several rows. */
typedef struct {
    const char *name, *alt; /* the flag and another spelling, or NULL */
    size_t field;           /* offsetof in cli_opts */
    int value;
} cli_flag_row;

#define CLI_FLAG(name, alt, field, value) {name, alt, CLI_FIELD(int, field), value}

static const cli_flag_row cli_flags[] = {
    CLI_FLAG("--ignore-eos", NULL, ignore_eos, 1),
    CLI_FLAG("--no-bos", NULL, no_bos, 1),
    CLI_FLAG("--no-echo", NULL, no_echo, 1),
    CLI_FLAG("-i", "--chat", interactive, 1),
    CLI_FLAG("--interactive", NULL, interactive, 1),
    CLI_FLAG("-q", "--quiet", quiet, 1),
    CLI_FLAG("--degrade-zero", NULL, degrade_zero, 1),
    CLI_FLAG("--degrade-eval", NULL, degrade_eval, 1),
    CLI_FLAG("--degrade-eval", NULL, degrade_zero, 1), /* the evaluation mode implies it */
    CLI_FLAG("--profile", NULL, profile, 1),
    CLI_FLAG("--verify-profile", NULL, verify_profile, 1),
    CLI_FLAG("--cuda-graphs", NULL, cuda_graphs, 1),
    CLI_FLAG("--no-cuda-graphs", NULL, cuda_graphs, 0),
    CLI_FLAG("--doorbell-graphs", NULL, cuda_graphs, 2),
    CLI_FLAG("--pdl", NULL, cuda_pdl, 1),
    CLI_FLAG("--pdl-all", NULL, cuda_pdl, 2),
    CLI_FLAG("--no-pdl", NULL, cuda_pdl, 0),
    CLI_FLAG("--attn-tc", NULL, attn_tc, 1),
    CLI_FLAG("--no-attn-tc", NULL, attn_tc, 0),
    CLI_FLAG("--attn-tc-split", NULL, attn_tc, 2),
    CLI_FLAG("--attn-tc-split-p", NULL, attn_tc, 3),
    CLI_FLAG("--q8-tiles", NULL, q8_tiles, 1),
    CLI_FLAG("--q8-sm60", NULL, q8_sm60, 1),
    CLI_FLAG("--no-q8-tiles", NULL, q8_tiles, 0),
    CLI_FLAG("--pin-experts", NULL, pin_experts, 1),
    CLI_FLAG("--no-pin-experts", NULL, pin_experts, 0),
    CLI_FLAG("--mlock", NULL, mlock, 1),
    CLI_FLAG("--hugepages", NULL, hugepages, 1),
    CLI_FLAG("--no-mmap", NULL, no_mmap, 1),
    CLI_FLAG("--cpu-pin", NULL, cpu_pin, 1),
    CLI_FLAG("--no-amx", NULL, no_amx, 1),
    CLI_FLAG("--gpu-prefetch", NULL, gpu_prefetch, 1),
    CLI_FLAG("--cpu-warm", NULL, cpu_warm, 1),
    CLI_FLAG("--no-cpu-warm", NULL, cpu_warm, 0),
    CLI_FLAG("--cache-admit", NULL, cache_admit, 1),
    CLI_FLAG("--no-cache-admit", NULL, cache_admit, 0),
    CLI_FLAG("--stage-ahead", NULL, stage_ahead, 1),
    CLI_FLAG("--stage-split", NULL, stage_split, 1),
    CLI_FLAG("--doorbell", NULL, doorbell, 1),
    CLI_FLAG("--cpu-misses", NULL, cpu_misses, 1),
    CLI_FLAG("--no-cpu-misses", NULL, cpu_misses, 0),
    CLI_FLAG("--pipe", NULL, pipe, 1),
    CLI_FLAG("--pipeline-windows", NULL, split.pipeline_windows, 1),
    CLI_FLAG("--cpu-moe", NULL, n_cpu_moe, -1),
    CLI_FLAG("--gpu-experts", NULL, n_cpu_moe, 0),
    CLI_FLAG("--gpu", NULL, gpu, 1),
    CLI_FLAG("--cpu", NULL, gpu, 0),
};

/* Options with a value: a string kept as given, an int in lo..hi ("auto" too, as -1, where
 * auto_ok), a float, or a function of its own. */
typedef enum { CLI_V_STR, CLI_V_INT, CLI_V_FLOAT, CLI_V_FN } cli_value_kind;

typedef struct {
    const char *name, *alt; /* the option and another spelling, or NULL */
    cli_value_kind kind;
    size_t field;           /* offsetof in cli_opts (not CLI_V_FN) */
    long lo, hi;            /* CLI_V_INT: the range */
    int auto_ok;            /* CLI_V_INT: "auto" sets -1 */
    int (*fn)(cli_opts *o, const char *a, const char *v); /* CLI_V_FN */
} cli_value_row;

#define CLI_STR(name, alt, field) {name, alt, CLI_V_STR, CLI_FIELD(const char *, field), 0, 0, 0, NULL}
#define CLI_INT(name, alt, field, lo, hi) {name, alt, CLI_V_INT, CLI_FIELD(int, field), lo, hi, 0, NULL}
#define CLI_INT_AUTO(name, alt, field, lo, hi) {name, alt, CLI_V_INT, CLI_FIELD(int, field), lo, hi, 1, NULL}
#define CLI_FLOAT(name, alt, field) {name, alt, CLI_V_FLOAT, CLI_FIELD(float, field), 0, 0, 0, NULL}
#define CLI_FN(name, alt, fn) {name, alt, CLI_V_FN, 0, 0, 0, 0, fn}

static const cli_value_row cli_values[] = {
    /* model, prompt, context, threads */
    CLI_STR("-m", "--model", model),
    CLI_STR("-p", "--prompt", prompt),
    CLI_STR("-f", "--file", prompt_file),
    CLI_INT("-n", "--n-predict", n_predict, -1, 1L << 30),
    CLI_INT("-c", "--ctx-size", n_ctx, 0, 1L << 30),
    CLI_INT("-t", "--threads", n_threads, 0, 4096),
    CLI_INT("-b", "--batch-size", n_batch, 1, 1L << 20),
    CLI_FN(NULL, "--kv-type", opt_kv_type),
    CLI_FN(NULL, "--cpu-isa", opt_cpu_isa),
    /* backend and expert placement */
    CLI_FN("-ngl", "--n-gpu-layers", opt_ngl),
    CLI_INT(NULL, "--n-cpu-moe", n_cpu_moe, 0, 1L << 20),
    CLI_INT_AUTO(NULL, "--expert-cache", expert_cache, 0, 1L << 30),
    CLI_FN(NULL, "--gpu-mem", opt_gpu_mem),
    CLI_FN(NULL, "--ram-budget", opt_ram_budget),
    CLI_FN(NULL, "--pcie-frac", opt_pcie_frac),
    CLI_FN(NULL, "--defer-cpu", opt_defer_cpu),
    CLI_FN(NULL, "--defer-cpu-below", opt_defer_below),
    CLI_INT_AUTO(NULL, "--stage-experts", stage_experts, 0, 1L << 30),
    CLI_INT_AUTO(NULL, "--pool-pcie", pool_pcie, 0, 1L << 20),
    CLI_FN(NULL, "--degrade-tau", opt_degrade_tau),
    CLI_FN(NULL, "--route-tail-skip", opt_route_tail_skip),
    CLI_FN(NULL, "--iq-stage-tables", opt_iq_stage_tables),
    /* several GPUs (docs/MULTI_GPU.md) */
    CLI_FN(NULL, "--layer-split", opt_layer_split),
    CLI_FN(NULL, "--split", opt_split),
    CLI_FN(NULL, "--split-device", opt_split_device),
    CLI_FN(NULL, "--peer-device", opt_peer_device),
    CLI_FN(NULL, "--expert-cache-device1", opt_expert_cache_dev),
    CLI_FN(NULL, "--expert-cache-device2", opt_expert_cache_dev),
    CLI_FN(NULL, "--expert-cache-device3", opt_expert_cache_dev),
    CLI_FN(NULL, "--expert-cache-device4", opt_expert_cache_dev),
    CLI_FN(NULL, "--expert-cache-device5", opt_expert_cache_dev),
    CLI_FN(NULL, "--expert-cache-device6", opt_expert_cache_dev),
    CLI_FN(NULL, "--expert-cache-device7", opt_expert_cache_dev),
    /* sampling */
    CLI_FLOAT(NULL, "--temp", sp.temperature),
    CLI_FLOAT(NULL, "--temperature", sp.temperature),
    CLI_INT(NULL, "--top-k", sp.top_k, 0, 1L << 30),
    CLI_FLOAT(NULL, "--top-p", sp.top_p),
    CLI_FLOAT(NULL, "--min-p", sp.min_p),
    CLI_FN(NULL, "--repeat-penalty", opt_repeat_penalty),
    CLI_INT(NULL, "--repeat-last-n", sp.repeat_last_n, 0, 1L << 20),
    CLI_FLOAT(NULL, "--presence-penalty", sp.presence_penalty),
    CLI_FLOAT(NULL, "--frequency-penalty", sp.frequency_penalty),
    CLI_FN(NULL, "--seed", opt_seed),
    CLI_FN(NULL, "--stop", opt_stop),
    /* output, dumps, chat */
    CLI_STR(NULL, "--logpos", logpos),
    CLI_INT(NULL, "--logpos-top", logpos_top, 1, 1000000),
    CLI_STR(NULL, "--stats-json", stats_json),
    CLI_STR(NULL, "--route-trace", route_trace),
    CLI_STR(NULL, "--route-replay", route_replay),
    /* speculative decoding */
    CLI_FN(NULL, "--spec", opt_spec),
    CLI_FN(NULL, "--draft-model", opt_draft_model),
    CLI_INT(NULL, "--draft-max", draft_max, 1, STRATA_DRAFT_MAX),
    CLI_INT(NULL, "--q8-sm60-bps", q8_sm60_bps, 1, 32),
    CLI_INT(NULL, "--draft-min", draft_min, 0, STRATA_DRAFT_MAX),
    CLI_FN(NULL, "--oracle-rate", opt_oracle_rate),
    CLI_INT(NULL, "--short-read", short_read, 0, 1L << 30),
    CLI_FN(NULL, "--chat-template", opt_chat_template),
    CLI_STR(NULL, "--system", system),
    CLI_STR(NULL, "--chat-template-file", chat_template_file),
    CLI_STR(NULL, "--chat-log", chat_log),
    /* perplexity */
    CLI_INT(NULL, "--stride", stride, 1, 1L << 30),
    CLI_STR(NULL, "--kl-base", kl_base),
    CLI_STR(NULL, "--kl", kl),
};

/* The flags that only GPU sessions use: a CPU session names those given in a warning. */
static void cli_note_gpu_only(cli_opts *o, const char *a) {
    static const char *const gpu_only[] = {
        "--cpu-moe", "--n-cpu-moe", "--gpu-experts", "--expert-cache", "--gpu-mem", "--cpu-misses",
        "--no-cpu-misses", "--pcie-frac", "--gpu-prefetch", "--cpu-warm", "--no-cpu-warm",
        "--cache-admit", "--no-cache-admit", "--stage-ahead", "--stage-split", "--defer-cpu", "--defer-cpu-below",
        "--doorbell", "--doorbell-graphs", "--pin-experts", "--no-pin-experts", "--stage-experts", "--pool-pcie",
        "--attn-tc", "--no-attn-tc", "--attn-tc-split", "--attn-tc-split-p", "--q8-tiles",
        "--no-q8-tiles", "--q8-sm60", "--q8-sm60-bps", "--cuda-graphs", "--no-cuda-graphs", "--pdl", "--no-pdl", "--pdl-all",
        "--iq-stage-tables", "--layer-split", "--split", "--split-device", "--pipeline-windows", "--peer-device",
        "--expert-cache-device1", "--expert-cache-device2", "--expert-cache-device3", "--expert-cache-device4",
        "--expert-cache-device5", "--expert-cache-device6", "--expert-cache-device7", NULL};
    for (int k = 0; gpu_only[k]; k++) {
        if (strcmp(a, gpu_only[k]) != 0) continue;
        for (int j = 0; j < o->n_gpu_only; j++)
            if (o->gpu_only[j] == gpu_only[k]) return;
        if (o->n_gpu_only < CLI_MAX_GPU_ONLY) o->gpu_only[o->n_gpu_only++] = gpu_only[k];
        return;
    }
}

/* ---------------------------------------------------------------------------------------------
 * The parser
 * ------------------------------------------------------------------------------------------- */

/* Stores value v of option a (as given) by its row. */
static int cli_set_value(cli_opts *o, const cli_value_row *r, const char *a, const char *v) {
    void *field = (char *)o + r->field;
    long x = 0;
    int rc = 0;
    switch (r->kind) {
    case CLI_V_STR:
        *(const char **)field = v;
        break;
    case CLI_V_INT:
        if (r->auto_ok && strcmp(v, "auto") == 0) *(int *)field = -1;
        else if (!(rc = parse_long(a, v, r->lo, r->hi, &x))) *(int *)field = (int)x;
        break;
    case CLI_V_FLOAT:
        rc = parse_float(a, v, (float *)field);
        break;
    case CLI_V_FN:
        rc = r->fn(o, a, v);
        break;
    }
    return rc;
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
    int flag = 0;
    for (size_t k = 0; k < sizeof cli_flags / sizeof cli_flags[0]; k++) {
        if (!opt_is(a, cli_flags[k].name, cli_flags[k].alt)) continue;
        *(int *)((char *)o + cli_flags[k].field) = cli_flags[k].value;
        flag = 1;
    }
    if (flag) {
        if (v) return cli_usage_error("option '%s' takes no value", a);
        return 1;
    }
    const cli_value_row *r = NULL;
    for (size_t k = 0; k < sizeof cli_values / sizeof cli_values[0] && !r; k++)
        if (opt_is(a, cli_values[k].name, cli_values[k].alt)) r = &cli_values[k];
    if (!r) return 0;
    if (!v) {
        if (*i + 1 >= argc) return cli_usage_error("option '%s' needs a value", a);
        v = argv[++*i];
    }
    const int rc = cli_set_value(o, r, a, v);
    return rc ? rc : 1;
}
