/* cpu.c - CPU feature detection (cpuid + xgetbv, probed once) and the process-wide choice of the
 * dot-product ISA level: strata_cpu_isa_supported/set/active/name. The kernel tables themselves
 * live in dot.c, which reads the active level from here. */
#include "dot.h"

#include <pthread.h>

/* ---------------------------------------------------------------------------------------------
 * Feature probe
 * ------------------------------------------------------------------------------------------- */

static st_cpu_features st_features;
static pthread_once_t st_features_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t st_xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static void st_probe_features(void) {
    st_cpu_features f;
    memset(&f, 0, sizeof f);
    unsigned a, b, c, d;
    unsigned max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 1 || !__get_cpuid(1, &a, &b, &c, &d)) {
        st_features = f;
        return;
    }
    int osxsave = (c >> 27) & 1;
    int avx = (c >> 28) & 1;
    int fma = (c >> 12) & 1;
    int f16c = (c >> 29) & 1;

    /* XCR0: which register states the OS saves on a context switch. */
    uint64_t xcr0 = osxsave ? st_xgetbv0() : 0;
    int os_ymm = (xcr0 & 0x6) == 0x6;            /* SSE (bit 1) + AVX (bit 2) */
    int os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM (bits 5-7) */
    int os_amx = (xcr0 & 0x60000) == 0x60000;    /* XTILECFG (bit 17) + XTILEDATA (bit 18) */

    unsigned b7 = 0, c7 = 0, d7 = 0, a7_1 = 0;
    if (max_leaf >= 7) {
        unsigned a7;
        __cpuid_count(7, 0, a7, b7, c7, d7);
        unsigned bb, cc, dd;
        if (a7 >= 1) __cpuid_count(7, 1, a7_1, bb, cc, dd);
    }

    if (avx && os_ymm) {
        f.avx2 = (b7 >> 5) & 1;
        f.fma = fma;
        f.f16c = f16c;
    }
    if (os_zmm) {
        f.avx512f = (b7 >> 16) & 1;
        f.avx512dq = (b7 >> 17) & 1;
        f.avx512bw = (b7 >> 30) & 1;
        f.avx512vl = (b7 >> 31) & 1;
        f.avx512vnni = (c7 >> 11) & 1;
        f.avx512bf16 = (a7_1 >> 5) & 1;
        if (!f.avx512f) f.avx512dq = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512bf16 = 0;
    }
    if (os_amx) {
        f.amx_bf16 = (d7 >> 22) & 1;
        f.amx_tile = (d7 >> 24) & 1;
        f.amx_int8 = (d7 >> 25) & 1;
    }
    st_features = f;
}
#else
static void st_probe_features(void) { memset(&st_features, 0, sizeof st_features); }
#endif

const st_cpu_features *st_cpu_get_features(void) {
    pthread_once(&st_features_once, st_probe_features);
    return &st_features;
}

/* ---------------------------------------------------------------------------------------------
 * ISA level selection
 * ------------------------------------------------------------------------------------------- */

/* The level strata_vec_dot uses; -1 until first read or set (then: the supported level). */
static int st_active_isa = -1;

strata_cpu_isa strata_cpu_isa_supported(void) {
    const st_cpu_features *f = st_cpu_get_features();
#if defined(__x86_64__) || defined(__i386__)
    /* The AVX-512 kernels need all five extensions; the AVX2 kernels need AVX2 + FMA + F16C. */
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni && f->avx2 &&
        f->fma && f->f16c)
        return STRATA_ISA_AVX512;
    if (f->avx2 && f->fma && f->f16c) return STRATA_ISA_AVX2;
#else
    (void)f;
#endif
    return STRATA_ISA_SCALAR;
}

strata_status strata_cpu_isa_set(strata_cpu_isa isa) {
    strata_cpu_isa best = strata_cpu_isa_supported();
    if (isa == STRATA_ISA_BEST) {
        isa = best;
    } else if (isa != STRATA_ISA_SCALAR && isa != STRATA_ISA_AVX2 && isa != STRATA_ISA_AVX512) {
        return st_error(STRATA_ERR_INVALID_ARG, "strata_cpu_isa_set: %d is not an ISA level",
                        (int)isa);
    } else if ((int)isa > (int)best) {
        return st_error(STRATA_ERR_UNSUPPORTED,
                        "strata_cpu_isa_set: this CPU lacks ISA level '%s' (best here: '%s')",
                        strata_cpu_isa_name(isa), strata_cpu_isa_name(best));
    }
    __atomic_store_n(&st_active_isa, (int)isa, __ATOMIC_RELEASE);
    return STRATA_OK;
}

strata_cpu_isa strata_cpu_isa_active(void) {
    int isa = __atomic_load_n(&st_active_isa, __ATOMIC_ACQUIRE);
    if (ST_UNLIKELY(isa < 0)) {
        int expected = -1;
        int best = (int)strata_cpu_isa_supported();
        /* A concurrent strata_cpu_isa_set wins over this default. */
        __atomic_compare_exchange_n(&st_active_isa, &expected, best, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE);
        isa = __atomic_load_n(&st_active_isa, __ATOMIC_ACQUIRE);
    }
    return (strata_cpu_isa)isa;
}

const char *strata_cpu_isa_name(strata_cpu_isa isa) {
    switch (isa) {
    case STRATA_ISA_SCALAR: return "scalar";
    case STRATA_ISA_AVX2: return "avx2";
    case STRATA_ISA_AVX512: return st_cpu_get_features()->avx512vnni ? "avx512-vnni" : "avx512";
    case STRATA_ISA_BEST: return "best";
    }
    return "unknown";
}
