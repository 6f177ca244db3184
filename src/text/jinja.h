/*
 * A Jinja interpreter for chat templates: the subset of Jinja2 that the chat
 * templates of GGUF files use, rendered as Hugging Face's apply_chat_template
 * renders them (trim_blocks and lstrip_blocks on, the loop controls `break`
 * and `continue`, `tojson` as Python's json.dumps without ASCII escapes,
 * the globals `raise_exception` and `strftime_now`).
 *
 *     char *text = NULL;
 *     size_t len = 0;
 *     const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}],"
 *                       " \"add_generation_prompt\": true, \"bos_token\": \"<s>\"}";
 *     if (cllm_jinja_render(template_src, ctx, 0, &text, &len) != CLLM_OK)
 *         ... cllm_last_error() says why (a syntax error with its line and
 *             column, an undefined value used, raise_exception's message) ...
 *     cllm_free(text);
 *
 * The context is a JSON object: its members are the template's variables
 * (messages, tools, add_generation_prompt, bos_token, eos_token and any
 * other). Values are Python's as Jinja2 sees them: none, bools, 64-bit
 * integers, doubles, strings (UTF-8; lengths, indices and slices count code
 * points), lists and insertion-ordered dicts; printing a value prints what
 * Python's str() would (True, None, {'a': 1}).
 *
 * A template comes from a file, so everything is bounded: the nesting of
 * the source, the depth of macro calls, the steps a render may take, the
 * memory it may use and the length of its output; past a bound the render
 * fails with CLLM_ERR_TOO_LARGE. Nothing of the template runs outside the
 * interpreter (no file, no import, no Python attribute).
 *
 * The lexer and parser are jinja-parse.c, values and JSON jinja-value.c,
 * the evaluator jinja-eval.c and the filters, tests and methods
 * jinja-builtins.c; docs/chat-templates.md lists what is supported.
 */
#ifndef CLLM_TEXT_JINJA_H
#define CLLM_TEXT_JINJA_H

#include "core/common.h"

/*
 * Renders `template_src` (NUL-terminated Jinja source) with the variables of
 * `context_json` (a JSON object, NUL-terminated; NULL for none) into a new
 * NUL-terminated string *out (cllm_free) of length *out_len (may be NULL).
 * `now` is the time strftime_now formats, in seconds since the epoch (local
 * time); 0 for the current time. Returns CLLM_OK; CLLM_ERR_FORMAT for a
 * syntax error in the template or the JSON, an error while rendering or a
 * raise_exception (the message says which, with the template's line);
 * CLLM_ERR_TOO_LARGE past a bound; CLLM_ERR_NOMEM. On failure *out and
 * *out_len are untouched. Thread-safe.
 */
cllm_status cllm_jinja_render(const char *template_src, const char *context_json, int64_t now,
                              char **out, size_t *out_len);

/*
 * Appends `s` as a JSON string literal (quotes included) to *buf of *len
 * bytes and capacity *cap (cllm_realloc'd; *buf may start NULL), escaping
 * as json.dumps with ensure_ascii=False does. CLLM_OK or CLLM_ERR_NOMEM.
 * For callers that build a context.
 */
cllm_status cllm_jinja_json_quote(char **buf, size_t *len, size_t *cap, const char *s);

#endif /* CLLM_TEXT_JINJA_H */
