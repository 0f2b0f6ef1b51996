/* tool_calls.c - a chat answer's tool calls in the format its chat template asks for (text.h):
 * the format told from the template's text, where the calls start (for a stream to hold them
 * back), and the calls read with yyjson into OpenAI's tool_calls. Hermes / Qwen <tool_call>
 * blocks, Llama 3.x bare JSON, Mistral [TOOL_CALLS], DeepSeek V3 / R1 special tokens, GLM-4.5's
 * <arg_key> / <arg_value> pairs, Qwen3-Coder's <function=> / <parameter=> XML (Seed-OSS's the
 * same in <seed:tool_call>), Kimi-K2's <|tool_call_begin|> tokens and functionary v3.1's
 * <function=NAME>{JSON} / v3.2's >>>NAME segments (gpt-oss's harmony channels: harmony.c). Pure
 * functions over the caller's bytes; anything that does not parse is the caller's content. */
#include "text.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char HERMES_OPEN[] = "<tool_call>", HERMES_CLOSE[] = "</tool_call>";
static const char QX_FUNC[] = "<function=";
static const char PY_TAG[] = "<|python_tag|>";
static const char MI_CALLS[] = "[TOOL_CALLS]", MI_ARGS[] = "[ARGS]", MI_ID[] = "[CALL_ID]";
static const char DS_BEGIN[] = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "begin\xEF\xBD\x9C>";
static const char DS_END[] = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "calls\xE2\x96\x81" "end\xEF\xBD\x9C>";
static const char DS_CALL[] = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "begin\xEF\xBD\x9C>";
static const char DS_CALL_END[] = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "call\xE2\x96\x81" "end\xEF\xBD\x9C>";
static const char DS_SEP[] = "<\xEF\xBD\x9Ctool\xE2\x96\x81" "sep\xEF\xBD\x9C>";
static const char KM_SECTION[] = "<|tool_calls_section_begin|>", KM_SECTION_END[] = "<|tool_calls_section_end|>";
static const char KM_CALL[] = "<|tool_call_begin|>", KM_ARGS[] = "<|tool_call_argument_begin|>";
static const char KM_CALL_END[] = "<|tool_call_end|>";
static const char FN_CLOSE[] = "</function>", F32_MARK[] = ">>>";
static const char SEED_OPEN[] = "<seed:tool_call>", SEED_CLOSE[] = "</seed:tool_call>";

int srv_tool_format(const char *tmpl) {
    if (!tmpl) return SRV_TOOLS_NONE;
    if (strstr(tmpl, "<|channel|>")) return SRV_TOOLS_HARMONY; /* gpt-oss (harmony.c) */
    if (strstr(tmpl, KM_SECTION) && strstr(tmpl, KM_CALL)) return SRV_TOOLS_KIMI;
    if (strstr(tmpl, ">>>all") && strstr(tmpl, ">>>${recipient}")) return SRV_TOOLS_FUNC32;
    if (strstr(tmpl, SEED_OPEN)) return SRV_TOOLS_SEED;
    if (strstr(tmpl, DS_BEGIN)) return SRV_TOOLS_DEEPSEEK;
    if (strstr(tmpl, MI_CALLS)) return SRV_TOOLS_MISTRAL;
    if (strstr(tmpl, HERMES_OPEN) && strstr(tmpl, "<arg_key>")) return SRV_TOOLS_GLM;
    if (strstr(tmpl, HERMES_OPEN) && (strstr(tmpl, "<function=") || strstr(tmpl, "<parameter="))) return SRV_TOOLS_QWEN_XML;
    if (strstr(tmpl, HERMES_OPEN)) return SRV_TOOLS_HERMES;
    if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<function=")) return SRV_TOOLS_FUNC31;
    if (strstr(tmpl, "<|start_header_id|>ipython<|end_header_id|>") || strstr(tmpl, PY_TAG)) return SRV_TOOLS_LLAMA3;
    return SRV_TOOLS_NONE;
}

/* Whether t[i..n) starts with the literal s (sn bytes). */
static int at(const char *t, size_t i, size_t n, const char *s, size_t sn) {
    return i <= n && n - i >= sn && !memcmp(t + i, s, sn);
}

static size_t skip_ws(const char *t, size_t i, size_t n) {
    while (i < n && (t[i] == ' ' || t[i] == '\n' || t[i] == '\r' || t[i] == '\t')) i++;
    return i;
}

/* The first mark (mn bytes) in t[0..n), or, not final, a partial one at the end; n when none. */
static size_t find_mark(const char *t, size_t n, const char *m, size_t mn, int final) {
    for (size_t i = 0; i + mn <= n; i++)
        if (!memcmp(t + i, m, mn)) return i;
    for (size_t h = mn - 1; h > 0 && !final; h--)
        if (h <= n && !memcmp(t + n - h, m, h)) return n - h;
    return n;
}

/* Llama 3.x: the whole content is the call, a JSON object (optionally after <|python_tag|>). */
static size_t llama3_start(const char *t, size_t n, int final) {
    const size_t lp = sizeof PY_TAG - 1, py = find_mark(t, n, PY_TAG, lp, final);
    const size_t i = skip_ws(t, 0, n);
    if (i < n && t[i] == '{') return i;
    if (i == n && !final) return i; /* nothing but blanks yet */
    return py;
}

static int word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

/* The earlier of two marks (partial ones at the end held back, not final). */
static size_t find_either(const char *t, size_t n, const char *a, const char *b, int final) {
    const size_t x = find_mark(t, n, a, strlen(a), final), y = find_mark(t, n, b, strlen(b), final);
    return x < y ? x : y;
}

/* Functionary v3.2: the prompt wrote the first >>>, so the answer opens with its recipient's
 * line: all (content up to the first >>>), a function's name and a JSON object (or python and
 * code: calls from 0), or else plain content up to the first >>>. Not final, a start that may
 * still become a recipient's line or a call decides nothing (0). */
static size_t func32_start(const char *t, size_t n, int final) {
    size_t r = 0;
    while (r < n && word_char(t[r])) r++;
    const int line = r < n && t[r] == '\n' && r > 0, all = line && r == 3 && !memcmp(t, "all", 3);
    if (r == n && !final) return 0;
    if (line && !all) {
        const size_t b = skip_ws(t, r + 1, n);
        if ((b == n && !final) || (b < n && t[b] == '{') || (r == 6 && !memcmp(t, "python", 6))) return 0;
    }
    const size_t from = all ? r + 1 : 0;
    return from + find_mark(t + from, n - from, F32_MARK, sizeof F32_MARK - 1, final);
}

size_t srv_tool_skip(int fmt, const char *t, size_t n) {
    return fmt == SRV_TOOLS_FUNC32 && at(t, 0, n, "all\n", 4) ? 4 : 0;
}

size_t srv_tool_start(int fmt, const char *t, size_t n, int final) {
    switch (fmt) {
    case SRV_TOOLS_HERMES:
    case SRV_TOOLS_GLM: return find_mark(t, n, HERMES_OPEN, sizeof HERMES_OPEN - 1, final);
    case SRV_TOOLS_QWEN_XML: { /* (Qwen3-Coder may leave out the first call's <tool_call>) */
        const size_t a = find_mark(t, n, HERMES_OPEN, sizeof HERMES_OPEN - 1, final);
        const size_t b = find_mark(t, n, QX_FUNC, sizeof QX_FUNC - 1, final);
        return a < b ? a : b;
    }
    case SRV_TOOLS_LLAMA3: return llama3_start(t, n, final);
    case SRV_TOOLS_MISTRAL: return find_mark(t, n, MI_CALLS, sizeof MI_CALLS - 1, final);
    case SRV_TOOLS_DEEPSEEK: return find_mark(t, n, DS_BEGIN, sizeof DS_BEGIN - 1, final);
    case SRV_TOOLS_KIMI: return find_either(t, n, KM_SECTION, KM_CALL, final);
    case SRV_TOOLS_FUNC31: return find_either(t, n, QX_FUNC, PY_TAG, final);
    case SRV_TOOLS_FUNC32: return func32_start(t, n, final);
    case SRV_TOOLS_SEED: return find_mark(t, n, SEED_OPEN, sizeof SEED_OPEN - 1, final);
    default: return n;
    }
}

/* One JSON value read from t[i..n) (trailing bytes left); *end past it. NULL when none. */
static yyjson_doc *read_value(const char *t, size_t i, size_t n, size_t *end) {
    if (i >= n) return NULL;
    yyjson_doc *j = yyjson_read_opts((char *)(uintptr_t)(t + i), n - i, YYJSON_READ_STOP_WHEN_DONE, NULL, NULL);
    if (j) *end = i + yyjson_doc_get_read_size(j);
    return j;
}

/* Appends {id, type, function: {name, arguments}} to arr, the arguments a JSON string's text
 * (alen bytes). Mistral's templates want 9-character alphanumeric ids. */
static void add_call_str(yyjson_mut_doc *d, yyjson_mut_val *arr, int fmt, int k, const char *name, size_t nlen,
                         const char *args, size_t alen, const char *gid, size_t gidlen) {
    yyjson_mut_val *call = yyjson_mut_obj(d), *fn = yyjson_mut_obj(d);
    char id[32];
    if (fmt == SRV_TOOLS_MISTRAL) snprintf(id, sizeof id, "call%05d", k % 100000);
    else snprintf(id, sizeof id, "call_%d", k);
    /* (the model's bytes, so made UTF-8: a string that is not would fail the whole answer's write) */
    if (gid && gidlen > 0) yyjson_mut_obj_add_val(d, call, "id", srv_text_val(d, gid, gidlen));
    else yyjson_mut_obj_add_strcpy(d, call, "id", id);
    yyjson_mut_obj_add_str(d, call, "type", "function");
    yyjson_mut_obj_add_val(d, fn, "name", srv_text_val(d, name, nlen));
    yyjson_mut_obj_add_val(d, fn, "arguments", srv_text_val(d, args, alen));
    yyjson_mut_obj_add_val(d, call, "function", fn);
    yyjson_mut_arr_append(arr, call);
}

void srv_tool_call_add(yyjson_mut_doc *d, yyjson_mut_val *arr, int k, const char *name, size_t nlen, const char *args,
                       size_t alen) {
    add_call_str(d, arr, SRV_TOOLS_HARMONY, k, name, nlen, args, alen, NULL, 0);
}

/* A call appended, args an object (written as a JSON string) or a string (as is); -1 when the
 * name or the arguments are not of those kinds. */
static int add_call(yyjson_mut_doc *d, yyjson_mut_val *arr, int fmt, int k, const char *name, size_t nlen,
                    yyjson_val *args, const char *gid, size_t gidlen) {
    if (!name || nlen == 0 || !(yyjson_is_obj(args) || yyjson_is_str(args))) return -1;
    if (yyjson_is_str(args)) {
        add_call_str(d, arr, fmt, k, name, nlen, yyjson_get_str(args), yyjson_get_len(args), gid, gidlen);
        return 0;
    }
    size_t len = 0;
    char *s = yyjson_val_write(args, 0, &len);
    if (!s) return -1;
    add_call_str(d, arr, fmt, k, name, nlen, s, len, gid, gidlen);
    free(s);
    return 0;
}

/* A call object {"name", "arguments" (or "parameters")} appended; -1 when it is not one. */
static int add_obj_call(yyjson_mut_doc *d, yyjson_mut_val *arr, int fmt, int k, yyjson_val *o) {
    yyjson_val *name = yyjson_obj_get(o, "name"), *args = yyjson_obj_get(o, "arguments");
    if (!args) args = yyjson_obj_get(o, "parameters");
    yyjson_val *id = yyjson_obj_get(o, "id");
    if (!yyjson_is_str(name)) return -1;
    return add_call(d, arr, fmt, k, yyjson_get_str(name), yyjson_get_len(name), args, yyjson_get_str(id),
                    yyjson_get_len(id));
}

/* Hermes: <tool_call>{...}</tool_call> blocks from t[i] on, with only blanks between. */
static int hermes_calls(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i) {
    const size_t lo = sizeof HERMES_OPEN - 1, lc = sizeof HERMES_CLOSE - 1;
    int k = 0;
    while (i < n) {
        if (!at(t, i, n, HERMES_OPEN, lo)) return -1;
        const size_t a = i + lo;
        const size_t b = a + find_mark(t + a, n - a, HERMES_CLOSE, lc, 1);
        if (b >= n) return -1; /* an unclosed block */
        yyjson_doc *j = yyjson_read(t + a, b - a, 0);
        const int rc = j ? add_obj_call(d, arr, SRV_TOOLS_HERMES, k, yyjson_doc_get_root(j)) : -1;
        yyjson_doc_free(j);
        if (rc) return -1;
        k++;
        i = skip_ws(t, b + lc, n);
    }
    return k;
}

/* Llama 3.x: [<|python_tag|>] {call} [; or blanks {call}]... to the end. */
static int llama3_calls(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i) {
    const size_t lp = sizeof PY_TAG - 1;
    if (at(t, i, n, PY_TAG, lp)) i += lp;
    int k = 0;
    for (i = skip_ws(t, i, n); i < n; k++) {
        size_t e = i;
        yyjson_doc *j = t[i] == '{' ? read_value(t, i, n, &e) : NULL;
        const int rc = j ? add_obj_call(d, arr, SRV_TOOLS_LLAMA3, k, yyjson_doc_get_root(j)) : -1;
        yyjson_doc_free(j);
        if (rc) return -1;
        i = skip_ws(t, e, n);
        if (i < n && t[i] == ';') i = skip_ws(t, i + 1, n);
    }
    return k;
}

/* Mistral: [TOOL_CALLS] [{...}, ...] (v3) or [TOOL_CALLS]name[CALL_ID]id[ARGS]{...} repeated. */
static int mistral_calls(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i) {
    const size_t lm = sizeof MI_CALLS - 1, la = sizeof MI_ARGS - 1, li = sizeof MI_ID - 1;
    int k = 0;
    while (i < n) {
        if (!at(t, i, n, MI_CALLS, lm)) return -1;
        i = skip_ws(t, i + lm, n);
        size_t e = i;
        if (i < n && t[i] == '[') { /* a JSON array of call objects */
            yyjson_doc *j = read_value(t, i, n, &e);
            yyjson_val *a = j ? yyjson_doc_get_root(j) : NULL, *x;
            int rc = yyjson_is_arr(a) && yyjson_arr_size(a) > 0 ? 0 : -1;
            size_t ai, amax;
            yyjson_arr_foreach(a, ai, amax, x) if (rc == 0) rc = add_obj_call(d, arr, SRV_TOOLS_MISTRAL, k++, x);
            yyjson_doc_free(j);
            if (rc) return -1;
        } else { /* name[CALL_ID]id[ARGS]{...} */
            const size_t name0 = i;
            while (i < n && t[i] != '[' && t[i] != '{' && t[i] != '\n') i++;
            const size_t name1 = i;
            size_t id0 = i, id1 = i;
            if (at(t, i, n, MI_ID, li)) {
                id0 = id1 = i += li;
                while (id1 < n && t[id1] != '[') id1++;
                i = id1;
            }
            if (!at(t, i, n, MI_ARGS, la)) return -1;
            yyjson_doc *j = read_value(t, i + la, n, &e);
            const int rc = j ? add_call(d, arr, SRV_TOOLS_MISTRAL, k++, t + name0, name1 - name0,
                                        yyjson_doc_get_root(j), t + id0, id1 - id0) : -1;
            yyjson_doc_free(j);
            if (rc) return -1;
        }
        i = skip_ws(t, e, n);
    }
    return k;
}

/* DeepSeek: calls-begin, then call-begin [type<sep>]NAME[\n```json\n]{...}[\n```] call-end, ...,
 * calls-end: R1 / V3 write "function<sep>NAME" and a fenced block, V3.1 "NAME<sep>{...}". */
static int deepseek_calls(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i) {
    const size_t lb = sizeof DS_BEGIN - 1, le = sizeof DS_END - 1, lc = sizeof DS_CALL - 1;
    const size_t lce = sizeof DS_CALL_END - 1, ls = sizeof DS_SEP - 1;
    if (!at(t, i, n, DS_BEGIN, lb)) return -1;
    int k = 0;
    for (i = skip_ws(t, i + lb, n); !at(t, i, n, DS_END, le); k++) {
        if (!at(t, i, n, DS_CALL, lc)) return -1;
        const size_t a = i + lc, sep = a + find_mark(t + a, n - a, DS_SEP, ls, 1);
        if (sep >= n) return -1;
        size_t name0 = a, name1 = sep, p = sep + ls;
        if (sep - a == 8 && !memcmp(t + a, "function", 8)) { /* R1 / V3: the name up to the newline */
            name0 = p;
            while (p < n && t[p] != '\n') p++;
            name1 = p;
        }
        p = skip_ws(t, p, n);
        const int fenced = at(t, p, n, "```", 3);
        if (fenced) {
            p += 3;
            if (at(t, p, n, "json", 4)) p += 4;
        }
        size_t e = p;
        yyjson_doc *j = read_value(t, skip_ws(t, p, n), n, &e);
        while (name1 > name0 && (t[name1 - 1] == ' ' || t[name1 - 1] == '\r')) name1--;
        const int rc = j ? add_call(d, arr, SRV_TOOLS_DEEPSEEK, k, t + name0, name1 - name0, yyjson_doc_get_root(j),
                                    NULL, 0) : -1;
        yyjson_doc_free(j);
        if (rc) return -1;
        e = skip_ws(t, e, n);
        if (fenced) {
            if (!at(t, e, n, "```", 3)) return -1;
            e = skip_ws(t, e + 3, n);
        }
        if (!at(t, e, n, DS_CALL_END, lce)) return -1;
        i = skip_ws(t, e + lce, n);
    }
    return skip_ws(t, i + le, n) == n ? k : -1;
}

/* Whether the request's tools give function name's parameter key a schema that is a string
 * (type "string", or an enum of strings): its value is then the text as written. */
static int param_is_string(yyjson_val *tools, const char *name, size_t nlen, const char *key, size_t klen) {
    size_t i, max;
    yyjson_val *tool;
    yyjson_arr_foreach(tools, i, max, tool) {
        yyjson_val *fn = yyjson_obj_get(tool, "function"), *nm = yyjson_obj_get(fn, "name");
        if (!yyjson_is_str(nm) || yyjson_get_len(nm) != nlen || memcmp(yyjson_get_str(nm), name, nlen)) continue;
        yyjson_val *props = yyjson_obj_get(yyjson_obj_get(fn, "parameters"), "properties");
        yyjson_val *p = yyjson_obj_getn(props, key, klen), *type = yyjson_obj_get(p, "type");
        if (yyjson_is_str(type)) return !strcmp(yyjson_get_str(type), "string");
        yyjson_val *en = yyjson_obj_get(p, "enum"), *x;
        size_t j, jmax;
        int strings = yyjson_is_arr(en) && yyjson_arr_size(en) > 0;
        yyjson_arr_foreach(en, j, jmax, x) strings &= yyjson_is_str(x);
        return strings;
    }
    return 0;
}

/* An XML-style argument's value into args[key]: as llama.cpp reads it, the text as written when
 * the tool's schema says string, else the JSON it parses as (a template writes non-strings with
 * tojson), else the text. */
static void add_arg(yyjson_mut_doc *d, yyjson_mut_val *args, yyjson_val *tools, const char *name, size_t nlen,
                    const char *k, size_t kl, const char *v, size_t vl) {
    yyjson_mut_val *key = yyjson_mut_strncpy(d, k, kl), *val = NULL;
    yyjson_doc *j = param_is_string(tools, name, nlen, k, kl) ? NULL : yyjson_read(v, vl, 0);
    if (j) val = yyjson_val_mut_copy(d, yyjson_doc_get_root(j));
    yyjson_doc_free(j);
    if (!val) val = yyjson_mut_strncpy(d, v, vl);
    yyjson_mut_obj_put(args, key, val);
}

/* The text between open (at t[i]) and close: [*a, *b), *e past close; -1 when not there. */
static int tagged(const char *t, size_t i, size_t n, const char *open, const char *close, size_t *a, size_t *b,
                  size_t *e) {
    const size_t lo = strlen(open), lc = strlen(close);
    if (!at(t, i, n, open, lo)) return -1;
    *a = i + lo;
    *b = *a + find_mark(t + *a, n - *a, close, lc, 1);
    if (*b >= n) return -1;
    *e = *b + lc;
    return 0;
}

/* One call's body t[i..) up to close (</tool_call>, Seed-OSS's </seed:tool_call>): GLM's NAME then
 * <arg_key>K</arg_key> <arg_value>V</arg_value> pairs, or Qwen3-Coder's <function=NAME>
 * <parameter=K>\nV\n</parameter> ... </function>; the call appended, *e past close; -1 when it is
 * neither. */
static int xml_call(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i, yyjson_val *tools,
                    int qwen, const char *close, int k, size_t *e) {
    size_t name0, name1, a, b;
    i = skip_ws(t, i, n);
    if (qwen) {
        if (tagged(t, i, n, "<function=", ">", &name0, &name1, &i)) return -1;
    } else {
        name0 = i;
        while (i < n && t[i] != '\n' && t[i] != '<' && t[i] != '{' && t[i] != '"') i++;
        name1 = i;
        while (name1 > name0 && (t[name1 - 1] == ' ' || t[name1 - 1] == '\r')) name1--;
    }
    if (name1 == name0) return -1;
    yyjson_mut_val *args = yyjson_mut_obj(d);
    for (i = skip_ws(t, i, n);; i = skip_ws(t, i, n)) {
        size_t k0, k1;
        if (qwen ? tagged(t, i, n, "<parameter=", ">", &k0, &k1, &i) : tagged(t, i, n, "<arg_key>", "</arg_key>", &k0, &k1, &i))
            break;
        if (qwen) {
            a = i;
            b = a + find_mark(t + a, n - a, "</parameter>", 12, 1);
            if (b >= n) return -1;
            i = b + 12;
            if (a < b && t[a] == '\n') a++; /* (the value on lines of its own) */
            if (b > a && t[b - 1] == '\n') b--;
        } else if (tagged(t, skip_ws(t, i, n), n, "<arg_value>", "</arg_value>", &a, &b, &i)) {
            return -1;
        }
        add_arg(d, args, tools, t + name0, name1 - name0, t + k0, k1 - k0, t + a, b - a);
    }
    if (qwen) {
        if (!at(t, i, n, "</function>", 11)) return -1;
        i = skip_ws(t, i + 11, n);
    }
    if (!at(t, i, n, close, strlen(close))) return -1;
    *e = i + strlen(close);
    size_t len = 0;
    char *s = yyjson_mut_val_write(args, 0, &len);
    if (!s) return -1;
    add_call_str(d, arr, qwen ? SRV_TOOLS_QWEN_XML : SRV_TOOLS_GLM, k, t + name0, name1 - name0, s, len, NULL, 0);
    free(s);
    return 0;
}

/* GLM-4.5 / Qwen3-Coder / Seed-OSS: open...close blocks (<tool_call>, <seed:tool_call>) from t[i]
 * on, only blanks between (Qwen3-Coder's first one, bare, may start at <function= without its
 * <tool_call>, as llama.cpp takes). */
static int xml_calls(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i, yyjson_val *tools,
                     int qwen, const char *open, const char *close, int bare) {
    const size_t lo = strlen(open);
    int k = 0;
    for (; i < n; k++) {
        size_t e = n;
        if (at(t, i, n, open, lo)) i += lo;
        else if (!(bare && k == 0 && at(t, i, n, QX_FUNC, sizeof QX_FUNC - 1))) return -1;
        if (xml_call(d, arr, t, n, i, tools, qwen, close, k, &e)) return -1;
        i = skip_ws(t, e, n);
    }
    return k;
}

/* Kimi-K2: [section-begin] (call-begin functions.NAME:IDX args-begin {...} [call-end])...
 * [section-end], the id functions.NAME:IDX as written (llama.cpp's marks but the call's opening
 * optional too). */
static int kimi_calls(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i) {
    const size_t ls = sizeof KM_SECTION - 1, lse = sizeof KM_SECTION_END - 1, lc = sizeof KM_CALL - 1;
    const size_t la = sizeof KM_ARGS - 1, lce = sizeof KM_CALL_END - 1;
    if (at(t, i, n, KM_SECTION, ls)) i = skip_ws(t, i + ls, n);
    int k = 0;
    for (; at(t, i, n, KM_CALL, lc); k++) {
        const size_t id0 = skip_ws(t, i + lc, n), args = id0 + find_mark(t + id0, n - id0, KM_ARGS, la, 1);
        if (args >= n || args - id0 < 13 || memcmp(t + id0, "functions.", 10)) return -1;
        size_t id1 = args, name1;
        while (id1 > id0 && (t[id1 - 1] == ' ' || t[id1 - 1] == '\n')) id1--;
        for (name1 = id1; name1 > id0 + 10 && t[name1 - 1] >= '0' && t[name1 - 1] <= '9';) name1--;
        if (name1 == id1 || name1 < id0 + 12 || t[name1 - 1] != ':') return -1; /* functions.N:0 at least */
        name1--;
        size_t e = n;
        yyjson_doc *j = read_value(t, skip_ws(t, args + la, n), n, &e);
        const int rc = j && yyjson_is_obj(yyjson_doc_get_root(j))
                           ? add_call(d, arr, SRV_TOOLS_KIMI, k, t + id0 + 10, name1 - id0 - 10, yyjson_doc_get_root(j),
                                      t + id0, id1 - id0)
                           : -1;
        yyjson_doc_free(j);
        if (rc) return -1;
        i = skip_ws(t, e, n);
        if (at(t, i, n, KM_CALL_END, lce)) i = skip_ws(t, i + lce, n);
    }
    if (at(t, i, n, KM_SECTION_END, lse)) i = skip_ws(t, i + lse, n);
    return i == n ? k : -1;
}

/* A call to python whose arguments are {"code": t[a..b)} (functionary's raw code). */
static int python_call(yyjson_mut_doc *d, yyjson_mut_val *arr, int fmt, int k, const char *t, size_t a, size_t b) {
    if (skip_ws(t, a, b) == b) return -1;
    yyjson_mut_doc *j = yyjson_mut_doc_new(NULL);
    yyjson_mut_val *o = j ? yyjson_mut_obj(j) : NULL;
    size_t len = 0;
    char *s = o && yyjson_mut_obj_add_strncpy(j, o, "code", t + a, b - a) ? yyjson_mut_val_write(o, 0, &len) : NULL;
    yyjson_mut_doc_free(j);
    if (!s) return -1; /* (not UTF-8: left as content) */
    add_call_str(d, arr, fmt, k, "python", 6, s, len, NULL, 0);
    free(s);
    return 0;
}

/* Functionary v3.1: <function=NAME>{...}</function> calls with only blanks between, the last
 * possibly <|python_tag|> and code to the end. */
static int func31_calls(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i) {
    const size_t lp = sizeof PY_TAG - 1, lc = sizeof FN_CLOSE - 1;
    int k = 0;
    for (; i < n; k++) {
        if (at(t, i, n, PY_TAG, lp)) return python_call(d, arr, SRV_TOOLS_FUNC31, k, t, i + lp, n) ? -1 : k + 1;
        size_t name0, name1, e = n;
        if (tagged(t, i, n, QX_FUNC, ">", &name0, &name1, &i) || name1 == name0) return -1;
        for (size_t c = name0; c < name1; c++)
            if (!word_char(t[c])) return -1;
        yyjson_doc *j = read_value(t, skip_ws(t, i, n), n, &e);
        const int rc = j && yyjson_is_obj(yyjson_doc_get_root(j))
                           ? add_call(d, arr, SRV_TOOLS_FUNC31, k, t + name0, name1 - name0, yyjson_doc_get_root(j), NULL, 0)
                           : -1;
        yyjson_doc_free(j);
        e = skip_ws(t, e, n);
        if (rc || !at(t, e, n, FN_CLOSE, lc)) return -1;
        i = skip_ws(t, e + lc, n);
    }
    return k;
}

/* Functionary v3.2: NAME\n{...} segments from t[i] on, each opened by >>> (the first bare when
 * it starts the answer: the prompt wrote its >>>); python's body raw code up to the next >>>. */
static int func32_calls(yyjson_mut_doc *d, yyjson_mut_val *arr, const char *t, size_t n, size_t i) {
    const size_t lm = sizeof F32_MARK - 1;
    int k = 0;
    for (; i < n; k++) {
        if (at(t, i, n, F32_MARK, lm)) i += lm;
        else if (!(k == 0 && i == 0)) return -1;
        const size_t name0 = i;
        while (i < n && word_char(t[i])) i++;
        if (i == name0 || i >= n || t[i] != '\n' || (i - name0 == 3 && !memcmp(t + name0, "all", 3))) return -1;
        const size_t name1 = i, b = skip_ws(t, i + 1, n);
        size_t e = n;
        int rc = -1;
        if (b < n && t[b] == '{') {
            yyjson_doc *j = read_value(t, b, n, &e);
            if (j && yyjson_is_obj(yyjson_doc_get_root(j)))
                rc = add_call(d, arr, SRV_TOOLS_FUNC32, k, t + name0, name1 - name0, yyjson_doc_get_root(j), NULL, 0);
            yyjson_doc_free(j);
        } else if (name1 - name0 == 6 && !memcmp(t + name0, "python", 6)) {
            e = i + 1 + find_mark(t + i + 1, n - i - 1, F32_MARK, lm, 1);
            rc = python_call(d, arr, SRV_TOOLS_FUNC32, k, t, i + 1, e);
        }
        if (rc) return -1;
        i = skip_ws(t, e, n);
    }
    return k;
}

int srv_tool_calls(int fmt, yyjson_mut_doc *d, yyjson_mut_val *obj, const char *key, const char *t, size_t n,
                   yyjson_val *tools, int *n_calls) {
    const size_t s = srv_tool_start(fmt, t, n, 1);
    if (s >= n) return -1;
    yyjson_mut_val *arr = yyjson_mut_arr(d);
    int k = -1;
    switch (fmt) {
    case SRV_TOOLS_HERMES: k = hermes_calls(d, arr, t, n, s); break;
    case SRV_TOOLS_LLAMA3: k = llama3_calls(d, arr, t, n, s); break;
    case SRV_TOOLS_MISTRAL: k = mistral_calls(d, arr, t, n, s); break;
    case SRV_TOOLS_DEEPSEEK: k = deepseek_calls(d, arr, t, n, s); break;
    case SRV_TOOLS_GLM: k = xml_calls(d, arr, t, n, s, tools, 0, HERMES_OPEN, HERMES_CLOSE, 0); break;
    case SRV_TOOLS_QWEN_XML: k = xml_calls(d, arr, t, n, s, tools, 1, HERMES_OPEN, HERMES_CLOSE, 1); break;
    case SRV_TOOLS_SEED: k = xml_calls(d, arr, t, n, s, tools, 1, SEED_OPEN, SEED_CLOSE, 0); break;
    case SRV_TOOLS_KIMI: k = kimi_calls(d, arr, t, n, s); break;
    case SRV_TOOLS_FUNC31: k = func31_calls(d, arr, t, n, s); break;
    case SRV_TOOLS_FUNC32: k = func32_calls(d, arr, t, n, s); break;
    default: break;
    }
    if (k <= 0) return -1;
    yyjson_mut_obj_add_val(d, obj, key, arr);
    *n_calls = k;
    return 0;
}
