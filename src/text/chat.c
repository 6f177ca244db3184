/* Chat templates: family detection and rendering of conversations. */
#include "text/chat.h"
#include "core/hostmem.h"
#include "text/jinja.h"

#include <stdlib.h>
#include <string.h>

static const char *const k_style_names[] = {
    [CLLM_CHAT_STYLE_CHATML] = "chatml", [CLLM_CHAT_STYLE_LLAMA2] = "llama2",
    [CLLM_CHAT_STYLE_LLAMA3] = "llama3", [CLLM_CHAT_STYLE_GEMMA] = "gemma",
    [CLLM_CHAT_STYLE_ZEPHYR] = "zephyr", [CLLM_CHAT_STYLE_PHI3] = "phi3",
};
_Static_assert(CLLM_ARRAY_SIZE(k_style_names) == CLLM_CHAT_STYLE_COUNT, "chat style names");

static const char *const k_style_eot[] = {
    [CLLM_CHAT_STYLE_CHATML] = "<|im_end|>", [CLLM_CHAT_STYLE_LLAMA2] = "</s>",
    [CLLM_CHAT_STYLE_LLAMA3] = "<|eot_id|>", [CLLM_CHAT_STYLE_GEMMA] = "<end_of_turn>",
    [CLLM_CHAT_STYLE_ZEPHYR] = "</s>",       [CLLM_CHAT_STYLE_PHI3] = "<|end|>",
};
_Static_assert(CLLM_ARRAY_SIZE(k_style_eot) == CLLM_CHAT_STYLE_COUNT, "chat style eot");

/* The roles a message may have; the templates print these names (gemma
 * maps assistant to "model"). */
typedef enum chat_role { ROLE_SYSTEM = 0, ROLE_USER, ROLE_ASSISTANT, ROLE_COUNT } chat_role;

static const char *const k_role_names[] = {
    [ROLE_SYSTEM] = "system",
    [ROLE_USER] = "user",
    [ROLE_ASSISTANT] = "assistant",
};
_Static_assert(CLLM_ARRAY_SIZE(k_role_names) == ROLE_COUNT, "chat role names");

/* The role of a message; ROLE_COUNT for none of the three. */
static chat_role role_of(const cllm_chat_msg *m) {
    for (int r = 0; r < ROLE_COUNT; r++) {
        if (m->role && strcmp(m->role, k_role_names[r]) == 0) return (chat_role)r;
    }
    return ROLE_COUNT;
}

#define STYLE_LIST "chatml, llama2, llama3, gemma, zephyr, phi3"

/* Longest default system prompt cllm_chat_default_system extracts (bytes). */
#define CHAT_MAX_DEFAULT_SYSTEM 4096

const char *cllm_chat_style_name(cllm_chat_style style) {
    if ((unsigned)style >= CLLM_CHAT_STYLE_COUNT) return "unknown";
    return k_style_names[style];
}

const char *cllm_chat_style_eot(cllm_chat_style style) {
    if ((unsigned)style >= CLLM_CHAT_STYLE_COUNT) return "";
    return k_style_eot[style];
}

bool cllm_chat_style_has_bos_text(cllm_chat_style style) {
    return style == CLLM_CHAT_STYLE_LLAMA2 || style == CLLM_CHAT_STYLE_LLAMA3 ||
           style == CLLM_CHAT_STYLE_GEMMA;
}

/* ---- names and detection ---- */

static bool ascii_ieq(const char *a, const char *b) {
    for (;; a++, b++) {
        unsigned char x = (unsigned char)*a, y = (unsigned char)*b;
        if (x >= 'A' && x <= 'Z') x = (unsigned char)(x - 'A' + 'a');
        if (y >= 'A' && y <= 'Z') y = (unsigned char)(y - 'A' + 'a');
        if (x != y) return false;
        if (x == 0) return true;
    }
}

cllm_status cllm_chat_style_from_name(const char *name, cllm_chat_style *out) {
    if (!out) return CLLM_NULL_ARG("out");
    static const struct {
        const char *name;
        cllm_chat_style style;
    } k_names[] = {
        {"chatml", CLLM_CHAT_STYLE_CHATML},  {"llama2", CLLM_CHAT_STYLE_LLAMA2},
        {"llama-2", CLLM_CHAT_STYLE_LLAMA2}, {"llama3", CLLM_CHAT_STYLE_LLAMA3},
        {"llama-3", CLLM_CHAT_STYLE_LLAMA3}, {"gemma", CLLM_CHAT_STYLE_GEMMA},
        {"gemma2", CLLM_CHAT_STYLE_GEMMA},   {"gemma3", CLLM_CHAT_STYLE_GEMMA},
        {"zephyr", CLLM_CHAT_STYLE_ZEPHYR},  {"phi3", CLLM_CHAT_STYLE_PHI3},
        {"phi-3", CLLM_CHAT_STYLE_PHI3},
    };
    if (name) {
        for (size_t i = 0; i < CLLM_ARRAY_SIZE(k_names); i++) {
            if (ascii_ieq(name, k_names[i].name)) {
                *out = k_names[i].style;
                return CLLM_OK;
            }
        }
    }
    return cllm_error(CLLM_ERR_UNSUPPORTED, "chat: unknown chat style '%s' (known: " STYLE_LIST ")",
                      name ? name : "(null)");
}

cllm_status cllm_chat_style_detect(const char *template_src, cllm_chat_style *out) {
    if (!out) return CLLM_NULL_ARG("out");
    const char *t = template_src;
    if (!t || !*t) {
        return cllm_error(CLLM_ERR_INVALID_ARG,
                          "chat: the model has no chat template (tokenizer.chat_template is "
                          "missing or empty); choose a style by name (" STYLE_LIST ")");
    }
    cllm_chat_style style;
    if (strstr(t, "<|start_header_id|>")) {
        style = CLLM_CHAT_STYLE_LLAMA3;
    } else if (strstr(t, "<|im_start|>")) {
        style = CLLM_CHAT_STYLE_CHATML;
    } else if (strstr(t, "<start_of_turn>")) {
        style = CLLM_CHAT_STYLE_GEMMA;
    } else if (strstr(t, "[INST]") && strstr(t, "<<SYS>>")) {
        style = CLLM_CHAT_STYLE_LLAMA2;
    } else if (strstr(t, "<|user|>") && strstr(t, "<|assistant|>") && !strstr(t, "<|end|>") &&
               (strstr(t, "</s>") || strstr(t, "eos_token"))) {
        style = CLLM_CHAT_STYLE_ZEPHYR;
    } else if (strstr(t, "<|user|>") && strstr(t, "<|assistant|>") && strstr(t, "<|end|>")) {
        style = CLLM_CHAT_STYLE_PHI3;
    } else {
        /* Quote the start of the template on one line. */
        char head[48];
        size_t i = 0;
        for (; i < sizeof(head) - 1 && t[i]; i++) {
            head[i] = (unsigned char)t[i] < 0x20 ? ' ' : t[i];
        }
        while (i > 0 && t[i] && ((unsigned char)t[i] & 0xC0) == 0x80) i--; /* whole UTF-8 */
        head[i] = '\0';
        const char *hint = "";
        if (strstr(t, "[INST]")) {
            hint = " ([INST] without <<SYS>>: a Mistral-style template; 'llama2' is close "
                   "but not identical)";
        }
        return cllm_error(CLLM_ERR_UNSUPPORTED,
                          "chat: unrecognised chat template \"%s%s\"%s; choose a style by "
                          "name (" STYLE_LIST ")",
                          head, t[i] ? "..." : "", hint);
    }
    *out = style;
    return CLLM_OK;
}

/* ---- default system prompt ---- */

/*
 * A ChatML template that adds a system message when the conversation has
 * none carries it as one string literal, e.g. SmolLM2's
 *     {{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, ...<|im_end|>\n' }}
 * where "\n" is a newline or, in some GGUF files, the two characters of the
 * Jinja escape. Literals that only open the system turn, such as
 *     {{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
 * are told apart by the closing quote before "<|im_end|>".
 */
/* The first `needle` in [s, end), or NULL. Unlike repeated strstr calls on
 * a long tail (which sanitizers turn quadratic with a strlen each), this
 * never reads past `end`. */
static const char *find_in(const char *s, const char *end, const char *needle) {
    const size_t n = strlen(needle);
    while ((size_t)(end - s) >= n) {
        const char *c = memchr(s, needle[0], (size_t)(end - s) - n + 1);
        if (!c) return NULL;
        if (memcmp(c, needle, n) == 0) return c;
        s = c + 1;
    }
    return NULL;
}

cllm_status cllm_chat_default_system(const char *template_src, char **out) {
    if (!out) return CLLM_NULL_ARG("out");
    static const char k_open[] = "<|im_start|>system";
    static const char k_close[] = "<|im_end|>";
    const char *t = template_src ? template_src : "";
    const char *t_end = t + strlen(t);
    /* Templates come from files: every scan below is linear in the template
     * (the cursor and `end` only move forward; the text is capped). */
    const char *cursor = t, *quote_at = NULL, *end = NULL;
    for (const char *p = find_in(t, t_end, k_open); p; p = find_in(p + 1, t_end, k_open)) {
        for (; cursor < p; cursor++) { /* the quote that opens the literal holding p */
            if (*cursor == '\'' || *cursor == '"') quote_at = cursor;
        }
        if (!quote_at) continue;
        const char quote = *quote_at;
        const char *text = p + sizeof(k_open) - 1;
        if (text[0] == '\n') {
            text += 1;
        } else if (text[0] == '\\' && text[1] == 'n') {
            text += 2;
        } else {
            continue;
        }
        if (!end || end < text) end = find_in(text, t_end, k_close);
        if (!end) break; /* no later literal can close either */
        if (end <= text || end - text > CHAT_MAX_DEFAULT_SYSTEM) continue;
        bool closed = false; /* an unescaped `quote` ends the literal before `end` */
        for (const char *c = text; c < end && !closed; c++) {
            if (*c == '\\') {
                c++; /* skips the escaped character */
            } else if (*c == quote) {
                closed = true;
            }
        }
        if (closed) continue;

        char *s = cllm_malloc((size_t)(end - text) + 1);
        if (!s) return cllm_error(CLLM_ERR_NOMEM, "chat: out of memory");
        size_t n = 0;
        for (const char *c = text; c < end; c++) {
            if (*c != '\\' || c + 1 == end) {
                s[n++] = *c;
                continue;
            }
            const char e = *++c;
            if (e == 'n') {
                s[n++] = '\n';
            } else if (e == 't') {
                s[n++] = '\t';
            } else if (e == '\\' || e == '\'' || e == '"') {
                s[n++] = e;
            } else { /* not decoded: keep both characters */
                s[n++] = '\\';
                s[n++] = e;
            }
        }
        s[n] = '\0';
        *out = s;
        return CLLM_OK;
    }
    *out = NULL;
    return CLLM_OK;
}

/* ---- rendering ---- */

/* Measures (buf == NULL) or writes the text; a write pass runs only after a
 * measure pass has shown that everything fits. */
typedef struct sink {
    char *buf;
    size_t len;
    bool overflow; /* the length does not fit in size_t */
} sink;

static void put_n(sink *k, const char *s, size_t n) {
    size_t end;
    if (k->overflow || cllm_add_overflow(k->len, n, &end)) {
        k->overflow = true;
        return;
    }
    if (k->buf) memcpy(k->buf + k->len, s, n);
    k->len = end;
}

static void put(sink *k, const char *s) { put_n(k, s, strlen(s)); }

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* strlen(s) without trailing ASCII whitespace. */
static size_t rstrip_len(const char *s) {
    size_t n = strlen(s);
    while (n > 0 && is_space(s[n - 1])) n--;
    return n;
}

/* Writes `s` without leading and trailing ASCII whitespace: Jinja's `| trim`,
 * Python's str.strip(). */
static void put_trimmed(sink *k, const char *s) {
    while (is_space(*s)) s++;
    put_n(k, s, rstrip_len(s));
}

/* msgs[0] if it is a system message, else NULL. */
static const char *leading_system(const cllm_chat_msg *msgs) {
    return role_of(&msgs[0]) == ROLE_SYSTEM ? msgs[0].content : NULL;
}

static void render_chatml(sink *k, const cllm_chat_msg *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        put(k, "<|im_start|>");
        put(k, msgs[i].role);
        put(k, "\n");
        put(k, msgs[i].content);
        put(k, "<|im_end|>\n");
    }
    if (gen) put(k, "<|im_start|>assistant\n");
}

/*
 * Meta's Llama 2 template: the system message goes inside the first user
 * turn as "<<SYS>>\n{S}\n<</SYS>>\n\n{U}", and each turn's whole content is
 * strip()ped (so only the user text's trailing whitespace goes, and with an
 * empty user text the "\n\n" too).
 */
static void render_llama2(sink *k, const cllm_chat_msg *msgs, size_t n, bool gen) {
    CLLM_UNUSED(gen);
    const char *sys = leading_system(msgs);
    for (size_t i = sys ? 1 : 0, turn = 0; i < n; i++, turn++) {
        const char *content = msgs[i].content;
        if (role_of(&msgs[i]) == ROLE_USER) {
            put(k, "<s>[INST] ");
            if (turn == 0 && sys) {
                put(k, "<<SYS>>\n");
                put(k, sys);
                put(k, "\n<</SYS>>");
                const size_t len = rstrip_len(content);
                if (len > 0) {
                    put(k, "\n\n");
                    put_n(k, content, len);
                }
            } else {
                put_trimmed(k, content);
            }
            put(k, " [/INST]");
        } else {
            put(k, " ");
            put_trimmed(k, content);
            put(k, " </s>");
        }
    }
}

static void render_llama3(sink *k, const cllm_chat_msg *msgs, size_t n, bool gen) {
    put(k, "<|begin_of_text|>");
    for (size_t i = 0; i < n; i++) {
        put(k, "<|start_header_id|>");
        put(k, msgs[i].role);
        put(k, "<|end_header_id|>\n\n");
        put_trimmed(k, msgs[i].content);
        put(k, "<|eot_id|>");
    }
    if (gen) put(k, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Gemma 3's template (Gemma 2's minus its refusal of system messages): the
 * system text, untrimmed, plus "\n\n" opens the first user turn. */
static void render_gemma(sink *k, const cllm_chat_msg *msgs, size_t n, bool gen) {
    const char *sys = leading_system(msgs);
    put(k, "<bos>");
    for (size_t i = sys ? 1 : 0, turn = 0; i < n; i++, turn++) {
        put(k, role_of(&msgs[i]) == ROLE_USER ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (turn == 0 && sys) {
            put(k, sys);
            put(k, "\n\n");
        }
        put_trimmed(k, msgs[i].content);
        put(k, "<end_of_turn>\n");
    }
    if (gen) put(k, "<start_of_turn>model\n");
}

static void render_zephyr(sink *k, const cllm_chat_msg *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        put(k, "<|");
        put(k, msgs[i].role);
        put(k, "|>\n");
        put(k, msgs[i].content);
        put(k, "</s>\n");
    }
    if (gen) put(k, "<|assistant|>\n");
}

/*
 * Phi-3 / Phi-3.5: "<|role|>\n{content}<|end|>\n" per message (contents
 * verbatim), prompt "<|assistant|>\n". Phi-3.5's template drops an empty
 * system message and Phi-3's drops every system message (both render the
 * rest alike); here a system message with content is kept, as in Phi-3.5
 * and llama.cpp. BOS comes from the tokenizer (Phi-3's "{{ bos_token }}").
 */
static void render_phi3(sink *k, const cllm_chat_msg *msgs, size_t n, bool gen) {
    for (size_t i = 0; i < n; i++) {
        if (role_of(&msgs[i]) == ROLE_SYSTEM && !msgs[i].content[0]) continue;
        put(k, "<|");
        put(k, msgs[i].role);
        put(k, "|>\n");
        put(k, msgs[i].content);
        put(k, "<|end|>\n");
    }
    if (gen) put(k, "<|assistant|>\n");
}

typedef void (*render_fn)(sink *k, const cllm_chat_msg *msgs, size_t n, bool gen);

static const render_fn k_renderers[] = {
    [CLLM_CHAT_STYLE_CHATML] = render_chatml, [CLLM_CHAT_STYLE_LLAMA2] = render_llama2,
    [CLLM_CHAT_STYLE_LLAMA3] = render_llama3, [CLLM_CHAT_STYLE_GEMMA] = render_gemma,
    [CLLM_CHAT_STYLE_ZEPHYR] = render_zephyr, [CLLM_CHAT_STYLE_PHI3] = render_phi3,
};
_Static_assert(CLLM_ARRAY_SIZE(k_renderers) == CLLM_CHAT_STYLE_COUNT, "chat renderers");

static cllm_status validate(cllm_chat_style style, const cllm_chat_msg *msgs, size_t n) {
    if ((unsigned)style >= CLLM_CHAT_STYLE_COUNT) {
        return cllm_error(CLLM_ERR_INVALID_ARG, "chat: style %d out of range", (int)style);
    }
    if (n == 0 || !msgs) return cllm_error(CLLM_ERR_INVALID_ARG, "chat: no messages to render");
    for (size_t i = 0; i < n; i++) {
        if (role_of(&msgs[i]) == ROLE_COUNT) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "chat: message %zu has role '%s' (expected system, user or "
                              "assistant)",
                              i, msgs[i].role ? msgs[i].role : "(null)");
        }
        if (!msgs[i].content) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "chat: message %zu has no content", i);
        }
    }
    if (style == CLLM_CHAT_STYLE_LLAMA2 || style == CLLM_CHAT_STYLE_GEMMA) {
        const size_t first = role_of(&msgs[0]) == ROLE_SYSTEM ? 1 : 0;
        if (first == n) {
            return cllm_error(CLLM_ERR_INVALID_ARG,
                              "chat: the %s template needs a user message after the system "
                              "message",
                              k_style_names[style]);
        }
        for (size_t i = first; i < n; i++) {
            const chat_role want = (i - first) % 2 == 0 ? ROLE_USER : ROLE_ASSISTANT;
            if (role_of(&msgs[i]) != want) {
                return cllm_error(CLLM_ERR_INVALID_ARG,
                                  "chat: the %s template needs an optional system message, then "
                                  "user and assistant turns alternating; message %zu is %s, "
                                  "expected %s",
                                  k_style_names[style], i, msgs[i].role, k_role_names[want]);
            }
        }
    }
    return CLLM_OK;
}

/* Validates and measures: *len receives strlen of the text. */
static cllm_status measure(cllm_chat_style style, const cllm_chat_msg *msgs, size_t n, bool gen,
                           size_t *len) {
    cllm_status st = validate(style, msgs, n);
    if (st != CLLM_OK) return st;
    sink k = {0};
    k_renderers[style](&k, msgs, n, gen);
    if (k.overflow || k.len == SIZE_MAX) {
        return cllm_error(CLLM_ERR_TOO_LARGE, "chat: rendered text exceeds the address space");
    }
    *len = k.len;
    return CLLM_OK;
}

cllm_status cllm_chat_render(cllm_chat_style style, const cllm_chat_msg *msgs, size_t n,
                             bool add_assistant_prompt, char *buf, size_t buf_size,
                             size_t *needed) {
    if (!needed || (!buf && buf_size > 0)) return CLLM_NULL_ARG("buf or needed");
    size_t len;
    cllm_status st = measure(style, msgs, n, add_assistant_prompt, &len);
    if (st != CLLM_OK) return st;
    *needed = len + 1;
    if (!buf) return CLLM_OK; /* a size query */
    if (buf_size < len + 1) {
        return cllm_error(CLLM_ERR_TOO_LARGE,
                          "chat: the rendered %s prompt needs %zu bytes, the buffer has %zu",
                          k_style_names[style], len + 1, buf_size);
    }
    sink k = {.buf = buf};
    k_renderers[style](&k, msgs, n, add_assistant_prompt);
    CLLM_ASSERT(k.len == len);
    buf[len] = '\0';
    return CLLM_OK;
}

cllm_status cllm_chat_render_alloc(cllm_chat_style style, const cllm_chat_msg *msgs, size_t n,
                                   bool add_assistant_prompt, char **out, size_t *out_len) {
    if (!out) return CLLM_NULL_ARG("out");
    size_t len;
    cllm_status st = measure(style, msgs, n, add_assistant_prompt, &len);
    if (st != CLLM_OK) return st;
    char *text = cllm_malloc(len + 1);
    if (!text) {
        return cllm_error(CLLM_ERR_NOMEM, "chat: out of memory for a %zu-byte prompt", len + 1);
    }
    sink k = {.buf = text};
    k_renderers[style](&k, msgs, n, add_assistant_prompt);
    CLLM_ASSERT(k.len == len);
    text[len] = '\0';
    *out = text;
    if (out_len) *out_len = len;
    return CLLM_OK;
}

/* ---- the file's own template (Jinja) ---- */

/* Appends the NUL-terminated `s` to a cllm_realloc'd buffer. */
static cllm_status append(char **buf, size_t *len, size_t *cap, const char *s) {
    const size_t n = strlen(s);
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1) c *= 2;
        char *nb = cllm_realloc(*buf, c);
        if (!nb) return cllm_error(CLLM_ERR_NOMEM, "chat: out of host memory");
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *len, s, n + 1);
    *len += n;
    return CLLM_OK;
}

cllm_status cllm_chat_render_template(const char *template_src, const cllm_chat_msg *msgs, size_t n,
                                      bool add_generation_prompt, const char *bos_token,
                                      const char *eos_token, char **out, size_t *out_len) {
    CLLM_ASSERT(template_src != NULL && out != NULL);
    if (n > 0 && !msgs) return cllm_error(CLLM_ERR_INVALID_ARG, "chat: no messages");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            return cllm_error(CLLM_ERR_INVALID_ARG, "chat: message %zu has no role or content", i);
        }
    }
    /* the context as JSON: {"messages": [...], "add_generation_prompt": .., ...} */
    char *ctx = NULL;
    size_t len = 0, cap = 0;
    cllm_status st = append(&ctx, &len, &cap, "{\"messages\": [");
    for (size_t i = 0; i < n && st == CLLM_OK; i++) {
        if (i) st = append(&ctx, &len, &cap, ", ");
        if (st == CLLM_OK) st = append(&ctx, &len, &cap, "{\"role\": ");
        if (st == CLLM_OK) st = cllm_jinja_json_quote(&ctx, &len, &cap, msgs[i].role);
        if (st == CLLM_OK) st = append(&ctx, &len, &cap, ", \"content\": ");
        if (st == CLLM_OK) st = cllm_jinja_json_quote(&ctx, &len, &cap, msgs[i].content);
        if (st == CLLM_OK) st = append(&ctx, &len, &cap, "}");
    }
    if (st == CLLM_OK) {
        st = append(&ctx, &len, &cap,
                    add_generation_prompt ? "], \"add_generation_prompt\": true, \"bos_token\": "
                                          : "], \"add_generation_prompt\": false, \"bos_token\": ");
    }
    if (st == CLLM_OK) st = cllm_jinja_json_quote(&ctx, &len, &cap, bos_token ? bos_token : "");
    if (st == CLLM_OK) st = append(&ctx, &len, &cap, ", \"eos_token\": ");
    if (st == CLLM_OK) st = cllm_jinja_json_quote(&ctx, &len, &cap, eos_token ? eos_token : "");
    if (st == CLLM_OK) st = append(&ctx, &len, &cap, "}");
    if (st == CLLM_OK) st = cllm_jinja_render(template_src, ctx, 0, out, out_len);
    cllm_free(ctx);
    return st;
}

cllm_status cllm_chat_template_render(const char *template_src, const char *context_json,
                                      char **out, size_t *out_len) {
    if (!template_src || !context_json || !out) {
        return CLLM_NULL_ARG("the template, the context or out");
    }
    return cllm_jinja_render(template_src, context_json, 0, out, out_len);
}
