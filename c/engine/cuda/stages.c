/* stages.c - a CUDA session's layer split (docs/MULTI_GPU.md, layer_split.h): the stages, each a
 * GPU state of its own (weights, KV cache, scratch and stream on its device, built by
 * forward_cuda_setup.c for its range of layers), and the hand-off of the hidden state from one
 * stage to the next: a copy on the device where two stages share one, a peer copy where the pair
 * has peer access, through pinned host rows otherwise. Each copy is ordered after the sending
 * stage's kernels and before the receiving stage's by events, so the layers run the kernels and
 * give the bits of the unsplit session. Without CUDA in the build there is nothing here. */
#include "forward_cuda.h"

#ifdef STRATA_HAVE_CUDA

#include <stdlib.h>

struct st_gpu_stages {
    int n;
    st_gpu *g[STRATA_MAX_STAGES];
    void *ev_sent[STRATA_MAX_STAGES];  /* [i]: stage i - 1's rows sent (on its device) */
    void *ev_taken[STRATA_MAX_STAGES]; /* [i]: stage i took the rows up from the pinned ones */
    int direct[STRATA_MAX_STAGES];     /* [i]: the copy from stage i - 1 runs on the devices */
    void *rows;                        /* pinned (3 x bytes a stage hands on), NULL: none needed */
    size_t rows_bytes;
};

strata_status st_gpu_stages_new(st_gpu *g0, int n) {
    st_gpu_stages *S = calloc(1, sizeof *S);
    if (!S) return st_error(STRATA_ERR_NOMEM, "gpu session: out of memory");
    S->n = n;
    S->g[0] = g0;
    g0->stages = S;
    return STRATA_OK;
}

void st_gpu_stages_put(st_gpu_stages *S, int i, st_gpu *g) { S->g[i] = g; }
int st_gpu_stages_n(const st_gpu_stages *S) { return S ? S->n : 1; }
st_gpu *st_gpu_stages_get(const st_gpu_stages *S, int i) { return S->g[i]; }

strata_status st_gpu_stage_enter(strata_session *s, const st_gpu_stages *S, int i) {
    s->gpu = S->g[i];
    return s->gpu && s->gpu->device >= 0 ? st_cuda_set_device(s->gpu->device) : STRATA_OK;
}

/* The bytes of one hand-off buffer: x and xn (n_batch rows), xq (ST_GPU_COLS Q8_1 rows). */
static size_t st_stage_rows_bytes(const st_hparams *hp, int64_t n_batch) {
    return sizeof(float) * (size_t)n_batch * (size_t)hp->n_embd;
}

strata_status st_gpu_stages_link(st_gpu_stages *S) {
    for (int i = 1; i < S->n; i++) {
        const int a = S->g[i - 1]->device, b = S->g[i]->device;
        int peer = 0;
        if (a != b) TRY(st_cuda_peer_enable(b, a, &peer));
        S->direct[i] = a == b || peer;
        TRY(st_cuda_set_device(a));
        TRY(st_cuda_event_create(&S->ev_sent[i]));
        TRY(st_cuda_set_device(b));
        TRY(st_cuda_event_create(&S->ev_taken[i]));
    }
    return st_cuda_set_device(S->g[0]->device);
}

/* One buffer of the hand-off: on the devices, or down into the pinned rows at `off`. */
static strata_status st_stage_send(st_gpu_stages *S, int i, void *dst, const void *src, size_t bytes, size_t off) {
    const st_gpu *a = S->g[i - 1], *b = S->g[i];
    if (S->direct[i]) return st_cuda_memcpy_d2d_async(dst, b->device, src, a->device, bytes, a->stream);
    return st_cuda_memcpy_async((char *)S->rows + off, src, bytes, 0, a->stream);
}

strata_status st_gpu_stage_handoff(strata_session *s, st_gpu_stages *S, int i, int64_t T) {
    const st_hparams *hp = &s->model->hp;
    st_gpu *a = S->g[i - 1], *b = S->g[i];
    const size_t rows = sizeof(float) * (size_t)T * (size_t)hp->n_embd;
    const size_t xq = a->xq && T <= ST_GPU_COLS ? st_cuda_mmv_scratch_bytes(hp->n_embd, ST_GPU_COLS) : 0;
    const size_t one = st_stage_rows_bytes(hp, s->n_batch);
    TRY(st_gpu_stage_enter(s, S, i - 1));
    if (!S->direct[i] && !S->rows) { /* the first hand-off through the host: its pinned rows */
        S->rows_bytes = 2 * one + st_cuda_mmv_scratch_bytes(hp->n_embd, ST_GPU_COLS);
        TRY(st_cuda_host_alloc(&S->rows, S->rows_bytes));
    }
    if (!S->direct[i]) TRY(st_cuda_stream_wait_event(a->stream, S->ev_taken[i])); /* the rows free */
    TRY(st_stage_send(S, i, b->x, a->x, rows, 0));
    TRY(st_stage_send(S, i, b->xn, a->xn, rows, one));
    if (xq) TRY(st_stage_send(S, i, b->xq, a->xq, xq, 2 * one));
    TRY(st_cuda_event_record(S->ev_sent[i], a->stream));
    TRY(st_gpu_stage_enter(s, S, i));
    if (S->direct[i]) return st_cuda_stream_wait_event(b->stream, S->ev_sent[i]);
    TRY(st_cuda_event_synchronize(S->ev_sent[i])); /* the rows are down: up to the next device */
    TRY(st_cuda_memcpy_async(b->x, S->rows, rows, 1, b->stream));
    TRY(st_cuda_memcpy_async(b->xn, (char *)S->rows + one, rows, 1, b->stream));
    if (xq) TRY(st_cuda_memcpy_async(b->xq, (char *)S->rows + 2 * one, xq, 1, b->stream));
    s->pcie_bytes += (int64_t)(4 * rows + 2 * xq);
    return st_cuda_event_record(S->ev_taken[i], b->stream);
}

void st_gpu_stages_release(st_gpu_stages *S) {
    if (!S) return;
    for (int i = 1; i < S->n; i++) {
        st_cuda_event_destroy(S->ev_sent[i]);
        st_cuda_event_destroy(S->ev_taken[i]);
    }
    st_cuda_host_free(S->rows);
    free(S);
}

#endif /* STRATA_HAVE_CUDA */
