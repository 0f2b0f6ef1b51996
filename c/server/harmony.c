/* harmony.c - gpt-oss's harmony answers (text.h): the messages after the template's generation
 * prompt (<|start|>assistant), each a header ([<|start|>ROLE][ to=RECIPIENT]<|channel|>CHANNEL
 * [ to=RECIPIENT][ <|constrain|>TYPE]<|message|>) and a body up to <|end|>, <|call|>, <|return|>
 * or the next header. analysis is reasoning, final and commentary are content, a message to
 * functions.NAME is a tool call (its body the JSON arguments) when the request has tools (else
 * its body is content, as other formats' calls are without tools), one to any other recipient (a
 * built-in tool) is dropped, as llama.cpp's common_chat_params_init_gpt_oss does. Walked for a
 * stream (what is safe to send, partial markers held back) or whole. Pure functions over the
 * caller's bytes. */
#include "text.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { H_REASONING, H_CONTENT, H_CALL, H_DROP };

/* One message: its kind, the raw text from its channel marker [raw, ...), its body [b0, b1), the
 * end of its terminator (end; b1 when it has none yet: closed 0), a call's name [name0, name1). */
typedef struct {
    int kind, closed;
    size_t raw, b0, b1, end, name0, name1;
} hmsg;

static const char START[] = "<|start|>", CHANNEL[] = "<|channel|>", MESSAGE[] = "<|message|>";
static const char *const TERMS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>", "<|channel|>"};
#define N_TERMS 5
#define HEADER_MAX 512 /* a header longer than this is not one */

static int at(const char *t, size_t i, size_t n, const char *s) {
    const size_t sn = strlen(s);
    return i <= n && n - i >= sn && !memcmp(t + i, s, sn);
}

/* The first s in t[i..j), j when none. */
static size_t find(const char *t, size_t i, size_t j, const char *s) {
    const size_t sn = strlen(s);
    for (; i + sn <= j; i++)
        if (!memcmp(t + i, s, sn)) return i;
    return j;
}

/* Whether t[i..n) is a proper prefix of s (what could still become s). */
static int partial(const char *t, size_t i, size_t n, const char *s) {
    return n > i && n - i < strlen(s) && !memcmp(t + i, s, n - i);
}

/* The recipient in header t[h0..h1): functions.NAME as a call, assistant ignored, any other
 * dropped. */
static void recipient(const char *t, size_t h0, size_t h1, hmsg *m) {
    for (size_t p = find(t, h0, h1, "to="); p < h1; p = find(t, p + 3, h1, "to=")) {
        size_t a = p + 3, b = a;
        while (b < h1 && t[b] != ' ' && t[b] != '<' && t[b] != '\n') b++;
        if (b - a > 10 && !memcmp(t + a, "functions.", 10)) {
            m->kind = H_CALL;
            m->name0 = a + 10;
            m->name1 = b;
            return;
        }
        if (!(b - a == 9 && !memcmp(t + a, "assistant", 9))) m->kind = H_DROP;
    }
}

/* The message at t[i..n) (i: where a header may start; first: the first, whose role header the
 * prompt opened). 1 with *m set (its body possibly still open), 0 when nothing can be said yet
 * (a header not whole; not final), -1 when no header starts there (the rest is plain text). */
static int next_msg(const char *t, size_t n, size_t i, int first, int final, hmsg *m) {
    if (!(at(t, i, n, START) || at(t, i, n, CHANNEL) || (first && at(t, i, n, " to=")))) {
        const int maybe = partial(t, i, n, START) || partial(t, i, n, CHANNEL) || (first && partial(t, i, n, " to="));
        return !final && (maybe || i == n) ? 0 : -1;
    }
    const size_t lim = n - i > HEADER_MAX ? i + HEADER_MAX : n;
    const size_t h1 = find(t, i, lim, MESSAGE);
    if (h1 == lim) return !final && lim == n ? 0 : -1;
    size_t ch = i, p = i; /* the last channel marker in the header */
    while ((p = find(t, p, h1, CHANNEL)) < h1) ch = p++;
    if (!at(t, ch, n, CHANNEL)) return -1;
    const size_t c0 = ch + sizeof CHANNEL - 1;
    size_t c1 = c0;
    while (c1 < h1 && t[c1] != ' ' && t[c1] != '<') c1++;
    m->kind = c1 - c0 == 8 && !memcmp(t + c0, "analysis", 8) ? H_REASONING : H_CONTENT;
    recipient(t, i, h1, m);
    m->raw = ch;
    m->b0 = h1 + sizeof MESSAGE - 1;
    m->b1 = m->end = n;
    m->closed = 0;
    for (int k = 0; k < N_TERMS; k++) {
        const size_t e = find(t, m->b0, m->b1, TERMS[k]);
        if (e < m->b1) {
            m->b1 = e;
            m->closed = 1;
            m->end = k < 3 ? e + strlen(TERMS[k]) : e; /* (a header that follows is the next one's) */
        }
    }
    if (m->b1 == n && !final) { /* open: hold back what could still become a terminator */
        size_t hold = 0;
        for (int k = 0; k < N_TERMS; k++)
            for (size_t h = strlen(TERMS[k]) - 1; h > hold; h--)
                if (n - m->b0 >= h && !memcmp(t + n - h, TERMS[k], h)) { hold = h; break; }
        m->b1 = m->b0 + srv_utf8_whole(t + m->b0, n - hold - m->b0);
        m->end = m->b1;
    }
    return 1;
}

/* A call's arguments t[a..b): a JSON object, appended to arr (when arr) as call k; -1 when not. */
static int harmony_call(yyjson_mut_doc *d, yyjson_mut_val *arr, int k, const char *t, const hmsg *m) {
    size_t a = m->b0, b = m->b1;
    while (a < b && (t[a] == ' ' || t[a] == '\n')) a++;
    yyjson_doc *j = a < b ? yyjson_read(t + a, b - a, 0) : NULL;
    yyjson_val *args = yyjson_doc_get_root(j);
    const int ok = yyjson_is_obj(args) && m->name1 > m->name0;
    if (ok && arr) {
        size_t len = 0;
        char *s = yyjson_val_write(args, 0, &len);
        if (s) srv_tool_call_add(d, arr, k, t + m->name0, m->name1 - m->name0, s, len);
        free(s);
    }
    yyjson_doc_free(j);
    return ok ? 0 : -1;
}

void srv_harmony_walk(const char *t, size_t n, int final, int raw_reasoning, int calls, size_t *pos, srv_emit_fn emit,
                      void *u) {
    size_t i = 0;
    for (int first = 1; i < n || first; first = 0) {
        hmsg m;
        const int r = next_msg(t, n, i, first, final, &m);
        if (r == 0) return;
        if (r > 0 && m.kind == H_CALL && !calls) m.kind = H_CONTENT; /* no tools asked: no calls */
        if (r < 0) { /* plain text from here on: content */
            if (!final) n = i + srv_utf8_whole(t + i, n - i);
            if (n > *pos && n > i) emit(u, 0, *pos > i ? *pos : i, n);
            if (n > *pos) *pos = n;
            return;
        }
        size_t a = m.b0, b = m.b1;
        int as_reasoning = m.kind == H_REASONING;
        if (m.kind == H_REASONING && raw_reasoning) { /* reasoning_format none: as written, in content */
            a = m.raw;
            b = m.end;
            as_reasoning = 0;
        }
        /* a call whose arguments are not a JSON object is content, decided once its body is
           whole: at the end, or (a stream) when its terminator has come */
        const int shown = m.kind == H_REASONING || m.kind == H_CONTENT ||
                          (m.kind == H_CALL && (final || m.closed) && harmony_call(NULL, NULL, 0, t, &m) != 0);
        if (shown && b > *pos && b > a) emit(u, as_reasoning, *pos > a ? *pos : a, b);
        if (shown && b > *pos) *pos = b;
        if (!m.closed || m.end == i) return;
        i = m.end;
    }
}

int srv_harmony_calls(yyjson_mut_doc *d, yyjson_mut_val *obj, const char *key, const char *t, size_t n, int *n_calls) {
    yyjson_mut_val *arr = yyjson_mut_arr(d);
    int k = 0;
    size_t i = 0;
    for (int first = 1; i < n; first = 0) {
        hmsg m;
        if (next_msg(t, n, i, first, 1, &m) != 1) break;
        if (m.kind == H_CALL && harmony_call(d, arr, k, t, &m) == 0) k++;
        if (!m.closed || m.end == i) break;
        i = m.end;
    }
    if (k == 0) return -1;
    yyjson_mut_obj_add_val(d, obj, key, arr);
    *n_calls = k;
    return 0;
}
