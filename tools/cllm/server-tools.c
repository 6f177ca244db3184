/* cllm serve: tool calls (server.h): the request's tools and tool_choice,
 * the chat template's context with tools and tool messages, the grammar
 * that forces a call, and the calls read back from the generated text. */
#include "server.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/random.h>

static int tool_fail(srv_tool_err *te, const char *param, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int tool_fail(srv_tool_err *te, const char *param, const char *code, const char *fmt, ...) {
    te->param = param;
    te->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(te->msg, sizeof(te->msg), fmt, ap);
    va_end(ap);
    return -1;
}

/* OpenAI's rule for a function's name. */
static bool valid_name(const char *s) {
    const size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-') return false;
    }
    return true;
}

int srv_tools_parse(json_t *o, srv_tools *t, srv_tool_err *te) {
    memset(t, 0, sizeof(*t));
    t->choice = SRV_TOOL_AUTO;
    t->parallel = true;
    json_t *tools = json_object_get(o, "tools");
    json_t *choice = json_object_get(o, "tool_choice");
    json_t *par = json_object_get(o, "parallel_tool_calls");
    if (par && !json_is_null(par)) {
        if (!json_is_boolean(par)) {
            return tool_fail(te, "parallel_tool_calls", "invalid_type",
                             "'parallel_tool_calls' must be a boolean");
        }
        t->parallel = json_is_true(par);
    }
    if (tools && !json_is_null(tools)) {
        if (!json_is_array(tools)) {
            return tool_fail(te, "tools", "invalid_type", "'tools' must be an array");
        }
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool) {
            json_t *fn = json_object_get(tool, "function");
            json_t *name = json_object_get(fn, "name");
            const char *type = json_string_value(json_object_get(tool, "type"));
            if (!json_is_object(tool) || !type || strcmp(type, "function") || !json_is_object(fn) ||
                !json_is_string(name) || !valid_name(json_string_value(name))) {
                return tool_fail(te, "tools", "invalid_value",
                                 "tools[%zu] must be {\"type\": \"function\", \"function\": "
                                 "{\"name\": NAME, ...}} with a name of 1 to 64 letters, digits, "
                                 "'_' or '-'",
                                 i);
            }
            const char *key;
            json_t *v;
            json_object_foreach(fn, key, v) {
                const bool ok = !strcmp(key, "name")          ? true
                                : !strcmp(key, "description") ? json_is_string(v)
                                : !strcmp(key, "parameters")  ? json_is_object(v)
                                : !strcmp(key, "strict") ? json_is_boolean(v) || json_is_null(v)
                                                         : false;
                if (!ok) {
                    return tool_fail(te, "tools", "invalid_value",
                                     "tools[%zu].function.%.64s is not supported or has the "
                                     "wrong type",
                                     i, key);
                }
            }
        }
        if (json_array_size(tools) > 0) t->tools = tools;
    }
    if (choice && !json_is_null(choice)) {
        const char *s = json_string_value(choice);
        json_t *fname = json_object_get(json_object_get(choice, "function"), "name");
        if (s && !strcmp(s, "none")) {
            t->choice = SRV_TOOL_NONE;
        } else if (s && !strcmp(s, "auto")) {
            t->choice = SRV_TOOL_AUTO;
        } else if (s && !strcmp(s, "required")) {
            t->choice = SRV_TOOL_REQUIRED;
        } else if (json_is_object(choice) && json_is_string(fname)) {
            t->choice = SRV_TOOL_NAMED;
            t->named = json_string_value(fname);
        } else {
            return tool_fail(te, "tool_choice", "invalid_value",
                             "'tool_choice' must be \"none\", \"auto\", \"required\" or "
                             "{\"type\": \"function\", \"function\": {\"name\": NAME}}");
        }
        if (t->choice != SRV_TOOL_NONE && !t->tools) {
            return tool_fail(te, "tool_choice", "invalid_value", "'tool_choice' needs 'tools'");
        }
        if (t->named && !srv_tools_find(t, t->named)) {
            return tool_fail(te, "tool_choice", "invalid_value",
                             "'tool_choice' names '%.64s', which is not in 'tools'", t->named);
        }
    }
    if (t->choice == SRV_TOOL_NONE) t->tools = NULL;
    return 0;
}

json_t *srv_tools_find(const srv_tools *t, const char *name) {
    size_t i;
    json_t *tool;
    json_array_foreach(t->tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        if (!strcmp(json_string_value(json_object_get(fn, "name")), name)) return fn;
    }
    return NULL;
}

/* Moves the $defs (and definitions) of a tool's parameters to the root
 * schema, where their "#/$defs/NAME" references point. */
static int hoist_defs(json_t *params, json_t *root, srv_tool_err *te) {
    static const char *const keys[] = {"$defs", "definitions"};
    for (size_t k = 0; k < 2; k++) {
        json_t *defs = json_object_get(params, keys[k]);
        if (!defs) continue;
        if (!json_is_object(defs)) {
            return tool_fail(te, "tools", "invalid_schema", "'%s' must be an object", keys[k]);
        }
        json_t *into = json_object_get(root, keys[k]);
        if (!into) {
            into = json_object();
            json_object_set_new(root, keys[k], into);
        }
        const char *name;
        json_t *d;
        json_object_foreach(defs, name, d) {
            json_t *had = json_object_get(into, name);
            if (had && !json_equal(had, d)) {
                return tool_fail(te, "tools", "invalid_schema",
                                 "two tools define '%s/%.64s' differently", keys[k], name);
            }
            json_object_set(into, name, d);
        }
        json_object_del(params, keys[k]);
    }
    return 0;
}

srv_tool_format srv_tools_format(const char *tmpl) {
    if (!tmpl) return SRV_TOOLFMT_GENERIC;
    if (strstr(tmpl, "<function=") && strstr(tmpl, "<parameter=")) return SRV_TOOLFMT_XML;
    if (strstr(tmpl, "<tool_call>")) return SRV_TOOLFMT_HERMES;
    if (strstr(tmpl, "[TOOL_CALLS]")) {
        return strstr(tmpl, "[ARGS]") ? SRV_TOOLFMT_MISTRAL_ARGS : SRV_TOOLFMT_MISTRAL;
    }
    if (strstr(tmpl, "<|python_tag|>") ||
        (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "\"parameters\""))) {
        return SRV_TOOLFMT_LLAMA3;
    }
    return SRV_TOOLFMT_GENERIC;
}

int srv_tools_triggers(srv_tool_format f, bool parallel, const char *const **words,
                       const char **control) {
    static const char *const tag[] = {"<tool_call>"};
    static const char *const mistral[] = {"[TOOL_CALLS]"};
    static const char *const json_one[] = {"{\"name\""};
    static const char *const json_list[] = {"{\"name\"", "[{\"name\""};
    *control = NULL;
    switch (f) {
    case SRV_TOOLFMT_HERMES:
    case SRV_TOOLFMT_XML: *words = tag; return 1;
    case SRV_TOOLFMT_MISTRAL:
    case SRV_TOOLFMT_MISTRAL_ARGS:
        *words = mistral;
        *control = "[TOOL_CALLS]";
        return 1;
    case SRV_TOOLFMT_LLAMA3:
        *words = json_one;
        *control = "<|python_tag|>";
        return 1;
    default: *words = parallel ? json_list : json_one; return parallel ? 2 : 1;
    }
}

/* Appends text[0, n) to *g (a string of malloc), with every rule name of
 * the GBNF text prefixed by `pfx` (names outside literals, character
 * classes, repetition counts and comments). False when out of memory. */
static bool append_prefixed(char **g, const char *text, const char *pfx) {
    const size_t n = strlen(text), pl = strlen(pfx), had = *g ? strlen(*g) : 0;
    size_t names = 0;
    for (size_t pass = 0; pass < 2; pass++) {
        char *out = pass ? *g + had : NULL;
        for (size_t i = 0; i < n;) {
            const char c = text[i];
            size_t j = i + 1;
            if (c == '"' || c == '[' || c == '{') { /* to the unescaped close */
                const char close = c == '"' ? '"' : c == '[' ? ']' : '}';
                while (j < n && text[j] != close) j += text[j] == '\\' && j + 1 < n ? 2 : 1;
                if (j < n) j++;
            } else if (c == '#') {
                while (j < n && text[j] != '\n') j++;
            } else if (isalnum((unsigned char)c) || c == '_' || c == '-') {
                while (j < n &&
                       (isalnum((unsigned char)text[j]) || text[j] == '_' || text[j] == '-')) {
                    j++;
                }
                if (!pass) names++;
                if (pass) {
                    memcpy(out, pfx, pl);
                    out += pl;
                }
            }
            if (pass) {
                memcpy(out, text + i, j - i);
                out += j - i;
            }
            i = j;
        }
        if (pass) {
            *out = '\0';
        } else {
            char *grown = realloc(*g, had + n + names * pl + 1);
            if (!grown) return false;
            *g = grown;
        }
    }
    return true;
}

/* Appends the formatted text to *g; false when out of memory. */
static bool append_text(char **g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static bool append_text(char **g, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *text = NULL;
    const int n = vasprintf(&text, fmt, ap);
    va_end(ap);
    if (n < 0) return false;
    const size_t had = *g ? strlen(*g) : 0;
    char *grown = realloc(*g, had + (size_t)n + 1);
    if (grown) {
        memcpy(grown + had, text, (size_t)n + 1);
        *g = grown;
    }
    free(text);
    return grown != NULL;
}

/* The grammar of schema `schema` (a JSON value) appended to *g with its
 * rules named pfx-NAME (its start: pfx-root); -1 after filling *te. */
static int append_schema(char **g, json_t *schema, const char *pfx, srv_tool_err *te) {
    char *text = json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text) return tool_fail(te, NULL, NULL, "out of memory");
    char *gbnf = NULL;
    const cllm_status st = cllm_json_schema_to_grammar(text, &gbnf);
    free(text);
    if (st != CLLM_OK) {
        return tool_fail(te, "tools", "invalid_schema", "the tools' parameters: %s",
                         cllm_last_error());
    }
    const bool ok = append_prefixed(g, gbnf, pfx);
    free(gbnf);
    return ok ? 0 : tool_fail(te, NULL, NULL, "out of memory");
}

/* Whether a property's schema is a plain string (XML: its value is text). */
static bool plain_string(json_t *prop) {
    const char *type = json_string_value(json_object_get(prop, "type"));
    return type && !strcmp(type, "string") && !json_object_get(prop, "enum") &&
           !json_object_get(prop, "const") && !json_object_get(prop, "pattern") &&
           !json_object_get(prop, "format") && !json_object_get(prop, "minLength") &&
           !json_object_get(prop, "maxLength");
}

/* The grammar of the forms that name a tool outside JSON: newer Mistral's
 * name[ARGS]{...} and the XML blocks. Each tool's rules are named tN-... */
static char *named_grammar(const srv_tools *t, bool several, srv_tool_err *te) {
    const bool xml = t->format == SRV_TOOLFMT_XML;
    char *g = NULL;
    bool ok;
    if (xml) {
        ok = append_text(&g,
                         "tool--root ::= tool--block%s\n"
                         "tool--block ::= \"<tool_call>\\n<function=\" tool--call "
                         "\"</function>\\n</tool_call>\"\n"
                         "tool--text ::= ([^<] | \"<\" [^/])*\n",
                         several ? " (\"\\n\" tool--block)*" : "");
    } else {
        ok = append_text(&g, "tool--root ::= \"[TOOL_CALLS]\"? tool--call%s\n",
                         several ? " (\"[TOOL_CALLS]\"? tool--call)*" : "");
    }
    if (!ok || !append_text(&g, "tool--call ::= ")) goto nomem;
    size_t i, k = 0;
    json_t *tool;
    json_array_foreach(t->tools, i, tool) {
        const char *name =
            json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
        if (t->named && strcmp(name, t->named) != 0) continue;
        if (!append_text(&g, xml ? "%s\"%s>\\n\" t%zu-args" : "%s\"%s\" \"[ARGS]\"? t%zu-args",
                         k++ ? " | " : "", name, i)) {
            goto nomem;
        }
    }
    if (!append_text(&g, "\n")) goto nomem;
    json_array_foreach(t->tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (t->named && strcmp(name, t->named) != 0) continue;
        json_t *params = json_object_get(fn, "parameters");
        char pfx[32];
        if (!xml) {
            snprintf(pfx, sizeof(pfx), "t%zu-", i);
            json_t *schema = params ? json_incref(params) : json_pack("{s:s}", "type", "object");
            if (!append_text(&g, "t%zu-args ::= t%zu-root\n", i, i)) {
                json_decref(schema);
                goto nomem;
            }
            const int r = append_schema(&g, schema, pfx, te);
            json_decref(schema);
            if (r < 0) goto fail;
            continue;
        }
        /* XML: the properties in their order, the required ones always */
        json_t *props = json_object_get(params, "properties");
        json_t *req = json_object_get(params, "required");
        json_t *defs = json_object_get(params, "$defs");
        if (!append_text(&g, "t%zu-args ::= \"\"", i)) goto nomem;
        const char *key;
        json_t *prop;
        size_t p = 0;
        json_object_foreach(props, key, prop) {
            bool needed = false;
            size_t r;
            json_t *x;
            json_array_foreach(req, r, x) {
                if (json_is_string(x) && !strcmp(json_string_value(x), key)) needed = true;
            }
            if (!append_text(&g, " t%zu-p%zu%s", i, p++, needed ? "" : "?")) goto nomem;
        }
        if (!append_text(&g, "\n")) goto nomem;
        p = 0;
        json_object_foreach(props, key, prop) {
            for (const char *c = key; *c; c++) {
                if (*c == '"' || *c == '\\' || *c == '<' || *c == '>' || (unsigned char)*c < 0x20) {
                    tool_fail(te, "tools", "invalid_schema",
                              "the property '%.64s' of '%.64s' cannot be written as XML", key,
                              name);
                    goto fail;
                }
            }
            snprintf(pfx, sizeof(pfx), "t%zu-p%zu-", i, p);
            const bool text = plain_string(prop);
            if (!append_text(&g,
                             "t%zu-p%zu ::= \"<parameter=%s>\\n\" %s%s \"\\n</parameter>\\n\"\n", i,
                             p, key, text ? "tool--text" : pfx, text ? "" : "root")) {
                goto nomem;
            }
            p++;
            if (text) continue;
            json_t *schema = json_deep_copy(prop);
            if (defs && json_is_object(schema)) json_object_set(schema, "$defs", defs);
            const int r = append_schema(&g, schema, pfx, te);
            json_decref(schema);
            if (r < 0) goto fail;
        }
    }
    return g;
nomem:
    tool_fail(te, NULL, NULL, "out of memory");
fail:
    free(g);
    return NULL;
}

char *srv_tools_grammar(const srv_tools *t, const char **root, srv_tool_err *te) {
    if (!t->tools || t->choice == SRV_TOOL_NONE) return NULL;
    const bool lazy = t->choice == SRV_TOOL_AUTO;
    /* Llama 3's templates write a call's arguments as "parameters" */
    const char *args_key = t->format == SRV_TOOLFMT_LLAMA3 ? "parameters" : "arguments";
    /* several calls: Llama 3's templates allow one */
    const bool several = t->parallel && !t->named && t->format != SRV_TOOLFMT_LLAMA3;
    if (t->format == SRV_TOOLFMT_MISTRAL_ARGS || t->format == SRV_TOOLFMT_XML) {
        char *g = named_grammar(t, several, te);
        if (g) *root = "tool--root";
        return g;
    }
    json_t *schema = json_object();
    json_t *calls = json_array();
    size_t i;
    json_t *tool;
    char *gbnf = NULL;
    json_array_foreach(t->tools, i, tool) {
        json_t *fn = json_object_get(tool, "function");
        const char *name = json_string_value(json_object_get(fn, "name"));
        if (t->named && strcmp(name, t->named) != 0) continue;
        json_t *params = json_object_get(fn, "parameters");
        params = params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
        if (hoist_defs(params, schema, te) < 0) {
            json_decref(params);
            goto done;
        }
        json_array_append_new(calls,
                              json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s],s:b}", "type", "object",
                                        "properties", "name", "const", name, args_key, params,
                                        "required", "name", args_key, "additionalProperties", 0));
    }
    json_t *one = json_pack("{s:o}", "anyOf", calls);
    calls = NULL;
    if (t->format == SRV_TOOLFMT_MISTRAL) {
        /* Mistral's form: always a list */
        json_t *list = json_pack("{s:s,s:O,s:i}", "type", "array", "items", one, "minItems", 1);
        if (!several) json_object_set_new(list, "maxItems", json_integer(1));
        json_object_set_new(schema, "anyOf", json_pack("[o]", list));
    } else if (several && t->format == SRV_TOOLFMT_GENERIC) {
        json_object_set_new(
            schema, "anyOf",
            json_pack("[O,{s:s,s:O,s:i}]", one, "type", "array", "items", one, "minItems", 1));
    } else {
        /* one call (Hermes: several are several tagged blocks) */
        json_object_set(schema, "anyOf", json_object_get(one, "anyOf"));
    }
    json_decref(one);
    char *text = json_dumps(schema, JSON_COMPACT);
    if (!text) {
        tool_fail(te, NULL, NULL, "out of memory");
        goto done;
    }
    const cllm_status st = cllm_json_schema_to_grammar(text, &gbnf);
    free(text);
    if (st != CLLM_OK) {
        tool_fail(te, "tools", "invalid_schema", "the tools' parameters: %s", cllm_last_error());
        gbnf = NULL;
        goto done;
    }
    *root = "root";
    if (t->format == SRV_TOOLFMT_HERMES) {
        /* the template's own form: each call in <tool_call> tags; the
         * schema's rule names never hold "--" */
        static const char one_block[] =
            "\ntool--root ::= \"<tool_call>\\n\" root \"\\n</tool_call>\"\n";
        static const char blocks[] =
            "\ntool--block ::= \"<tool_call>\\n\" root \"\\n</tool_call>\"\n"
            "tool--root ::= tool--block (\"\\n\" tool--block)*\n";
        const char *wrap = several ? blocks : one_block;
        char *g = realloc(gbnf, strlen(gbnf) + strlen(wrap) + 1);
        if (!g) {
            free(gbnf);
            gbnf = NULL;
            tool_fail(te, NULL, NULL, "out of memory");
            goto done;
        }
        strcat(g, wrap);
        gbnf = g;
        *root = "tool--root";
    } else if (lazy && t->format == SRV_TOOLFMT_MISTRAL) {
        /* its trigger: the control token (then the list) or its text */
        if (!append_text(&gbnf, "\ntool--root ::= \"[TOOL_CALLS]\"? root\n")) {
            free(gbnf);
            gbnf = NULL;
            tool_fail(te, NULL, NULL, "out of memory");
            goto done;
        }
        *root = "tool--root";
    }
done:
    json_decref(calls);
    json_decref(schema);
    return gbnf;
}

int srv_tools_set_grammar(const srv_tools *t, const cllm_model *m, srv_gen_params *gp,
                          srv_tool_err *te) {
    const char *root = NULL;
    char *g = srv_tools_grammar(t, &root, te);
    if (!g) return -1;
    const char *const *words = NULL;
    const char *control = NULL;
    int n_words = 0;
    int32_t *trig = NULL;
    if (t->choice == SRV_TOOL_AUTO) {
        n_words = srv_tools_triggers(t->format, t->parallel, &words, &control);
        int32_t ids[4];
        size_t k = 0, len = 1;
        char piece[16];
        /* the control token, when the model has it: one token without text */
        if (control && m &&
            cllm_tokenize(m, control, strlen(control), false, true, ids, 4, &k) == CLLM_OK &&
            k == 1 && cllm_detokenize(m, ids, 1, 0, piece, sizeof(piece), &len) == CLLM_OK &&
            len == 0) {
            if (!(trig = malloc(sizeof(*trig)))) {
                free(g);
                return tool_fail(te, NULL, NULL, "out of memory");
            }
            trig[0] = ids[0];
        }
    }
    free(gp->grammar);
    free(gp->triggers);
    gp->grammar = g;
    gp->triggers = trig;
    gp->rp.sampling.grammar = g;
    gp->rp.sampling.grammar_root = root; /* a constant string */
    gp->rp.sampling.grammar_triggers = words;
    gp->rp.sampling.n_grammar_triggers = n_words;
    gp->rp.sampling.grammar_trigger_tokens = trig;
    gp->rp.sampling.n_grammar_trigger_tokens = trig ? 1 : 0;
    return 0;
}

/* A call's id: "call_" and 96 random bits. */
static void call_id(char *out, size_t size) {
    uint32_t w[3] = {0, 0, 0};
    if (getrandom(w, sizeof(w), GRND_NONBLOCK) != (ssize_t)sizeof(w)) {
        static _Atomic unsigned n;
        w[0] = (uint32_t)++n;
    }
    snprintf(out, size, "call_%08x%08x%08x", w[0], w[1], w[2]);
}

static bool add_call(const char *name, json_t *args, json_t *out);

/* Appends the calls of a parsed value (an object {"name", "arguments"} or
 * an array of them) to `out`; false when it is not of that shape. */
static bool add_calls(json_t *v, json_t *out) {
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) return false;
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            if (!json_is_object(x) || !add_calls(x, out)) return false;
        }
        return true;
    }
    json_t *name = json_object_get(v, "name");
    json_t *args = json_object_get(v, "arguments");
    if (!args) args = json_object_get(v, "parameters");
    if (!json_is_object(v) || !json_is_string(name)) return false;
    return add_call(json_string_value(name), args, out);
}

/* Appends the call of `name` with `args` (an object, or its JSON text) to
 * `out`; false when the name or the arguments are not valid. */
static bool add_call(const char *name, json_t *args, json_t *out) {
    if (!valid_name(name) || !(json_is_object(args) || json_is_string(args))) return false;
    char *a = json_is_string(args) ? strdup(json_string_value(args))
                                   : json_dumps(args, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (!a) return false;
    char id[48];
    call_id(id, sizeof(id));
    json_array_append_new(out, json_pack("{s:s,s:s,s:{s:s,s:s}}", "id", id, "type", "function",
                                         "function", "name", name, "arguments", a));
    free(a);
    return true;
}

static const char *skip_space(const char *s, const char *end) {
    while (s < end && isspace((unsigned char)*s)) s++;
    return s;
}

/* The tag that opens the calls of format f, or NULL: calls only as the
 * whole answer. */
static const char *call_tag(srv_tool_format f) {
    return f == SRV_TOOLFMT_HERMES || f == SRV_TOOLFMT_XML             ? "<tool_call>"
           : f == SRV_TOOLFMT_MISTRAL || f == SRV_TOOLFMT_MISTRAL_ARGS ? "[TOOL_CALLS]"
                                                                       : NULL;
}

/* Whether s[0, n) begins with `word`. */
static bool starts(const char *s, size_t n, const char *word) {
    const size_t w = strlen(word);
    return n >= w && !memcmp(s, word, w);
}

/* Appends the calls of the JSON values in s[0, n), one after another
 * (white space, ';' or ',' between them), to `out`; false when there are
 * none or one is not a call. */
static bool calls_in(const char *s, size_t n, json_t *out) {
    const char *end = s + n;
    bool any = false;
    for (;;) {
        while (s < end && (isspace((unsigned char)*s) || *s == ';' || (any && *s == ','))) s++;
        if (s == end) return any;
        if (*s != '{' && *s != '[') return false;
        json_error_t err;
        json_t *v = json_loadb(s, (size_t)(end - s), JSON_DISABLE_EOF_CHECK, &err);
        const bool ok = v && add_calls(v, out);
        json_decref(v);
        if (!ok || err.position <= 0 || (size_t)err.position > (size_t)(end - s)) return false;
        s += err.position;
        any = true;
    }
}

/* The length of the name a function's name may begin with at s[0, n). */
static size_t name_len(const char *s, size_t n) {
    size_t k = 0;
    while (k < n && (isalnum((unsigned char)s[k]) || s[k] == '_' || s[k] == '-')) k++;
    return k;
}

/* Appends newer Mistral's calls in s[0, n) to `out`: name[ARGS]{...}, one
 * after another, each after an optional [TOOL_CALLS] ([TOOL_CALLS] and
 * [ARGS] may be control tokens, not in the text); false when there are
 * none or something else is there. */
static bool args_calls(const char *s, size_t n, json_t *out) {
    const char *end = s + n;
    bool any = false;
    for (;;) {
        s = skip_space(s, end);
        if (starts(s, (size_t)(end - s), "[TOOL_CALLS]")) s = skip_space(s + 12, end);
        if (s == end) return any;
        const size_t k = name_len(s, (size_t)(end - s));
        if (k == 0 || k > 64) return false;
        char name[65];
        memcpy(name, s, k);
        name[k] = '\0';
        s += k;
        if (starts(s, (size_t)(end - s), "[ARGS]")) s += 6;
        s = skip_space(s, end);
        if (s == end || *s != '{') return false;
        json_error_t err;
        json_t *v = json_loadb(s, (size_t)(end - s), JSON_DISABLE_EOF_CHECK, &err);
        const bool ok = v && add_call(name, v, out);
        json_decref(v);
        if (!ok || err.position <= 0 || (size_t)err.position > (size_t)(end - s)) return false;
        s += err.position;
        any = true;
    }
}

/* Whether the schema of parameter `param` of the tool called `fn` in
 * `tools` (a request's "tools" array, or NULL) says its value is a string
 * and nothing else. */
static bool param_is_string(const json_t *tools, const char *fn, const char *param) {
    size_t i;
    const json_t *t;
    json_array_foreach(tools, i, t) {
        const json_t *f = json_object_get(t, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!name || strcmp(name, fn) != 0) continue;
        const json_t *props = json_object_get(json_object_get(f, "parameters"), "properties");
        const json_t *type = json_object_get(json_object_get(props, param), "type");
        return json_is_string(type) && strcmp(json_string_value(type), "string") == 0;
    }
    return false;
}

/* Appends the call of one XML block's inside s[0, n) to `out`:
 * <function=NAME> and <parameter=P>VALUE</parameter> for each argument
 * (one line end around VALUE dropped; VALUE read as JSON when it is, else
 * as a string; always as a string where `tools` gives the parameter the
 * type string), then </function>; false when it is something else. */
static bool xml_call(const json_t *tools, const char *s, size_t n, json_t *out) {
    const char *end = s + n;
    s = skip_space(s, end);
    if (!starts(s, (size_t)(end - s), "<function=")) return false;
    s += 10;
    const size_t k = name_len(s, (size_t)(end - s));
    if (k == 0 || k > 64 || s + k == end || s[k] != '>') return false;
    char name[65];
    memcpy(name, s, k);
    name[k] = '\0';
    s += k + 1;
    json_t *args = json_object();
    bool ok = false;
    for (;;) {
        s = skip_space(s, end);
        if (starts(s, (size_t)(end - s), "</function>")) {
            s = skip_space(s + 11, end);
            ok = s == end;
            break;
        }
        if (!starts(s, (size_t)(end - s), "<parameter=")) break;
        s += 11;
        const char *gt = memchr(s, '>', (size_t)(end - s));
        if (!gt || gt == s) break;
        const char *v = gt + 1;
        static const char close[] = "</parameter>";
        const char *q = memmem(v, (size_t)(end - v), close, sizeof(close) - 1);
        if (!q) break;
        const char *ve = q;
        if (v < ve && *v == '\n') v++;
        if (ve > v && ve[-1] == '\n') ve--;
        if (ve > v && ve[-1] == '\r') ve--;
        char *key = strndup(s, (size_t)(gt - s));
        json_t *val = key && !param_is_string(tools, name, key)
                          ? json_loadb(v, (size_t)(ve - v), JSON_DECODE_ANY, NULL)
                          : NULL;
        if (!val) val = json_stringn(v, (size_t)(ve - v));
        if (!val || !key) {
            json_decref(val);
            free(key);
            break;
        }
        json_object_set_new(args, key, val);
        free(key);
        s = q + sizeof(close) - 1;
    }
    ok = ok && add_call(name, args, out);
    json_decref(args);
    return ok;
}

/* The calls of an answer that is only calls, from its beginning s[0, n):
 * a control token's text (when a template's file spells it out) and a
 * ```json fence around them allowed. */
static bool whole_calls(const char *s, size_t n, json_t *out) {
    const char *end = s + n;
    s = skip_space(s, end);
    static const char *const marks[] = {"<|python_tag|>", "[TOOL_CALLS]"};
    for (size_t k = 0; k < 2; k++) {
        if (starts(s, (size_t)(end - s), marks[k])) s = skip_space(s + strlen(marks[k]), end);
    }
    if (starts(s, (size_t)(end - s), "```")) {
        s += 3;
        if (starts(s, (size_t)(end - s), "json")) s += 4;
        if (s < end && *s != '\n' && *s != '\r' && !isspace((unsigned char)*s)) return false;
        while (end > s && isspace((unsigned char)end[-1])) end--;
        if (end - s < 3 || memcmp(end - 3, "```", 3) != 0) return false;
        end -= 3;
    }
    return calls_in(s, (size_t)(end - s), out);
}

json_t *srv_tools_extract(srv_tool_format f, const json_t *tools, const char *text, size_t len,
                          bool start, size_t *content_len) {
    const char *end = text + len;
    json_t *calls = json_array();
    const char *tag = call_tag(f);
    const char *first = tag ? memmem(text, len, tag, strlen(tag)) : NULL;
    if (first && (f == SRV_TOOLFMT_HERMES || f == SRV_TOOLFMT_XML)) {
        /* Hermes and Qwen: <tool_call>{...}</tool_call>, one or more; XML:
         * <tool_call><function=...>...</function></tool_call> */
        static const char open[] = "<tool_call>", close[] = "</tool_call>";
        for (const char *p = first; p; p = memmem(p, (size_t)(end - p), open, sizeof(open) - 1)) {
            p += sizeof(open) - 1;
            const char *q = memmem(p, (size_t)(end - p), close, sizeof(close) - 1);
            const char *stop = q ? q : end;
            if (!(f == SRV_TOOLFMT_XML && xml_call(tools, p, (size_t)(stop - p), calls)) &&
                !calls_in(p, (size_t)(stop - p), calls)) {
                goto none;
            }
            if (!q) break;
            p = q + sizeof(close) - 1;
        }
    } else if (first && f == SRV_TOOLFMT_MISTRAL_ARGS) {
        /* newer Mistral: [TOOL_CALLS]name[ARGS]{...}, one or more */
        if (!args_calls(first, (size_t)(end - first), calls)) goto none;
    } else if (first) {
        /* Mistral: [TOOL_CALLS] and a list of calls */
        const char *p = first + strlen(tag);
        if (!calls_in(p, (size_t)(end - p), calls)) goto none;
    } else if (start && whole_calls(text, len, calls)) {
        first = text;
    } else if (start && f == SRV_TOOLFMT_MISTRAL_ARGS &&
               (json_array_clear(calls), args_calls(text, len, calls))) {
        first = text;
    } else {
        goto none;
    }
    size_t n = (size_t)(first - text);
    while (n > 0 && isspace((unsigned char)text[n - 1])) n--;
    *content_len = n;
    return calls;
none:
    json_decref(calls);
    return NULL;
}

/* Whether an answer that begins s[0, n) (not all white space) may be only
 * calls (whole_calls), as far as it goes. */
static bool may_be_whole(const char *s, size_t n) {
    const char *end = s + n;
    if (*s == '{' || *s == '[') return true;
    static const char *const marks[] = {"<|python_tag|>", "```"};
    for (size_t k = 0; k < 2; k++) {
        const size_t m = strlen(marks[k]);
        if (n < m) {
            if (!memcmp(s, marks[k], n)) return true;
            continue;
        }
        if (memcmp(s, marks[k], m) != 0) continue;
        if (k == 0) return true;
        /* a fence: its language, if any, is json, and a call follows */
        const char *p = s + m;
        size_t w = 0;
        while (p + w < end && isalpha((unsigned char)p[w])) w++;
        if (w > 4 || memcmp(p, "json", w) != 0) return false;
        if (p + w == end) return true;
        if (w != 0 && w != 4) return false;
        p = skip_space(p + w, end);
        return p == end || *p == '{' || *p == '[';
    }
    return false;
}

size_t srv_tools_plain(srv_tool_format f, const char *text, size_t len) {
    const char *end = text + len;
    const char *s = skip_space(text, end);
    if (s == end || may_be_whole(s, (size_t)(end - s))) return 0;
    if (f == SRV_TOOLFMT_MISTRAL_ARGS) {
        /* newer Mistral's name{...}: its control tokens are not in the text */
        const size_t k = name_len(s, (size_t)(end - s));
        const char *p = s + k;
        const size_t m = (size_t)(end - p) < 6 ? (size_t)(end - p) : 6;
        if (k > 0 && (p == end || *p == '{' || (m > 0 && !memcmp(p, "[ARGS]", m)))) return 0;
    }
    const char *tag = call_tag(f);
    if (!tag) return len;
    const size_t t = strlen(tag);
    const char *at = memmem(text, len, tag, t);
    size_t n = at ? (size_t)(at - text) : len;
    if (!at) {
        /* the longest end of the text that begins the tag */
        for (size_t k = t - 1 < len ? t - 1 : len; k > 0; k--) {
            if (!memcmp(text + len - k, tag, k)) {
                n = len - k;
                break;
            }
        }
    }
    while (n > 0 && isspace((unsigned char)text[n - 1])) n--;
    return n;
}

/* The text of a message's content for the template: a string, null, or
 * text parts joined. NULL: another type. */
static json_t *content_value(json_t *v) {
    if (!v || json_is_null(v)) return json_null();
    if (json_is_string(v)) return json_incref(v);
    if (!json_is_array(v)) return NULL;
    json_t *out = json_string("");
    size_t i;
    json_t *p;
    json_array_foreach(v, i, p) {
        json_t *t = json_object_get(p, "text");
        const char *type = json_string_value(json_object_get(p, "type"));
        if (!json_is_string(t) || !type || strcmp(type, "text")) {
            json_decref(out);
            return NULL;
        }
        const size_t a = json_string_length(out), b = json_string_length(t);
        char *joined = malloc(a + b + 1);
        if (!joined) {
            json_decref(out);
            return NULL;
        }
        memcpy(joined, json_string_value(out), a);
        memcpy(joined + a, json_string_value(t), b);
        json_string_setn_nocheck(out, joined, a + b);
        free(joined);
    }
    return out;
}

int srv_tools_messages(json_t *msgs, const srv_tools *t, bool template_has_tools, json_t **out,
                       srv_tool_err *te) {
    json_t *list = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!json_is_object(m) || !role) {
            json_decref(list);
            return tool_fail(te, "messages", "invalid_type",
                             "messages[%zu] must be an object with a string 'role'", i);
        }
        if (!strcmp(role, "developer")) role = "system";
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
            strcmp(role, "tool")) {
            json_decref(list);
            return tool_fail(te, "messages", "invalid_value",
                             "messages[%zu]: role '%.64s' is not system, user, assistant or tool",
                             i, role);
        }
        json_t *content = content_value(json_object_get(m, "content"));
        if (!content) {
            json_decref(list);
            return tool_fail(te, "messages", "invalid_type",
                             "messages[%zu]: 'content' must be a string, null or text parts", i);
        }
        json_t *msg = json_pack("{s:s,s:o}", "role", role, "content", content);
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls)) {
            size_t k;
            json_t *c;
            json_t *copy = json_array();
            if (!json_is_array(calls) || strcmp(role, "assistant") != 0) goto bad_calls;
            json_array_foreach(calls, k, c) {
                json_t *fn = json_object_get(c, "function");
                json_t *name = json_object_get(fn, "name");
                json_t *args = json_object_get(fn, "arguments");
                if (!json_is_string(name) || !(json_is_string(args) || json_is_object(args))) {
                    json_decref(copy);
                    goto bad_calls;
                }
                /* templates take the arguments as an object */
                json_t *obj = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL)
                                                   : json_incref(args);
                if (!obj) obj = json_incref(args);
                json_t *id = json_object_get(c, "id");
                json_array_append_new(copy,
                                      json_pack("{s:s,s:O*,s:{s:O,s:o}}", "type", "function", "id",
                                                id, "function", "name", name, "arguments", obj));
            }
            json_object_set_new(msg, "tool_calls", copy);
            if (!template_has_tools && json_is_null(content)) {
                /* a template that knows no tools sees the calls as text */
                char *s = json_dumps(copy, JSON_COMPACT);
                json_object_set_new(msg, "content", json_string(s ? s : ""));
                free(s);
            }
        }
        json_t *tcid = json_object_get(m, "tool_call_id");
        if (tcid && !json_is_null(tcid)) {
            if (!json_is_string(tcid) || strcmp(role, "tool") != 0) {
                json_decref(msg);
                json_decref(list);
                return tool_fail(te, "messages", "invalid_value",
                                 "messages[%zu]: 'tool_call_id' is a string on a tool message", i);
            }
            json_object_set(msg, "tool_call_id", tcid);
        }
        json_t *name = json_object_get(m, "name");
        if (json_is_string(name)) json_object_set(msg, "name", name);
        const char *key;
        json_t *v;
        json_object_foreach(m, key, v) {
            if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "tool_calls") &&
                strcmp(key, "tool_call_id") && strcmp(key, "name")) {
                json_decref(msg);
                json_decref(list);
                return tool_fail(te, "messages", "unsupported_parameter",
                                 "messages[%zu].%.64s is not supported", i, key);
            }
        }
        json_array_append_new(list, msg);
        continue;
    bad_calls:
        json_decref(msg);
        json_decref(list);
        return tool_fail(
            te, "messages", "invalid_value",
            "messages[%zu]: 'tool_calls' must be an assistant's array of "
            "{\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
            i);
    }
    if (t->tools && !template_has_tools) {
        /* a template that knows no tools: they are described in the system
         * message, with the form of a call */
        char *desc = json_dumps(t->tools, JSON_COMPACT | JSON_PRESERVE_ORDER);
        const char *head =
            "You can call these functions. To call one, answer with only a JSON object "
            "{\"name\": FUNCTION, \"arguments\": {...}}.\nFunctions: ";
        json_t *first = json_array_get(list, 0);
        const char *r0 = json_string_value(json_object_get(first, "role"));
        const char *c0 = json_string_value(json_object_get(first, "content"));
        const bool merge = r0 && !strcmp(r0, "system") && c0;
        size_t n = strlen(head) + (desc ? strlen(desc) : 0) + (merge ? strlen(c0) + 2 : 0) + 1;
        char *sys = malloc(n);
        if (!sys || !desc) {
            free(sys);
            free(desc);
            json_decref(list);
            return tool_fail(te, NULL, NULL, "out of memory");
        }
        snprintf(sys, n, "%s%s%s%s", merge ? c0 : "", merge ? "\n\n" : "", head, desc);
        free(desc);
        if (merge) {
            json_object_set_new(first, "content", json_string(sys));
        } else {
            json_array_insert_new(list, 0,
                                  json_pack("{s:s,s:s}", "role", "system", "content", sys));
        }
        free(sys);
    }
    *out = list;
    return 0;
}
