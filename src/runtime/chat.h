/*
 * Chat templates: turn a conversation into the prompt text a chat model was
 * trained on.
 *
 *     const char *tmpl = ...;  // GGUF metadata "tokenizer.chat_template" (Jinja source)
 *     cllm_chat_style style;
 *     if (cllm_chat_style_detect(tmpl, &style) != CLLM_OK)
 *         return ...;          // or cllm_chat_style_from_name("chatml", &style)
 *     char *def_sys = NULL;    // ChatML templates may carry a default system prompt
 *     cllm_chat_default_system(tmpl, &def_sys);
 *     const char *sys = my_system ? my_system : def_sys; // NULL: no system message
 *     cllm_chat_msg msgs[2];
 *     size_t n = 0;
 *     if (sys) msgs[n++] = (cllm_chat_msg){.role = "system", .content = sys};
 *     msgs[n++] = (cllm_chat_msg){.role = "user", .content = "Hi!"};
 *     char *text = NULL;
 *     size_t len = 0;
 *     if (cllm_chat_render_alloc(style, msgs, n, true, &text, &len) != CLLM_OK) return ...;
 *     bool add_bos = !cllm_chat_style_has_bos_text(style) && <the tokenizer's add_bos>;
 *     ... tokenize `text` (special tokens parsed), generate until
 *         cllm_chat_style_eot(style) or the model's EOS ...
 *     cllm_free(text);
 *     cllm_free(def_sys);
 *
 * The library does not run Jinja. It recognises a template's family by
 * distinctive substrings and renders that family's format in C, reproducing
 * what the reference template renders (Hugging Face apply_chat_template with
 * add_generation_prompt):
 *
 *   chatml  (SmolLM2, Qwen2, ...)  no BOS in the text
 *       <|im_start|>system\n{S}<|im_end|>\n<|im_start|>user\n{U}<|im_end|>\n
 *       <|im_start|>assistant\n{A}<|im_end|>\n ...   prompt: <|im_start|>assistant\n
 *   llama2  (Llama 2 chat)  "<s>" before every user turn; contents stripped
 *       <s>[INST] <<SYS>>\n{S}\n<</SYS>>\n\n{U} [/INST] {A} </s><s>[INST] {U2} [/INST]
 *       (no separate prompt: " [/INST]" already cues the assistant)
 *   llama3  (Llama 3.x instruct)  "<|begin_of_text|>" first; contents trimmed
 *       <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{S}<|eot_id|>
 *       <|start_header_id|>user<|end_header_id|>\n\n{U}<|eot_id|> ...
 *       prompt: <|start_header_id|>assistant<|end_header_id|>\n\n
 *   gemma  (Gemma 2/3)  "<bos>" first; system folded into the first user
 *       turn; the assistant role is "model"; contents trimmed (not the system)
 *       <bos><start_of_turn>user\n{S}\n\n{U}<end_of_turn>\n
 *       <start_of_turn>model\n{A}<end_of_turn>\n ...   prompt: <start_of_turn>model\n
 *   zephyr  (Zephyr, TinyLlama chat)  no BOS in the text
 *       <|system|>\n{S}</s>\n<|user|>\n{U}</s>\n<|assistant|>\n{A}</s>\n ...
 *       prompt: <|assistant|>\n
 *
 * Known differences from the reference templates: a default system prompt
 * that a template inserts when the conversation has none (SmolLM2's "You are
 * a helpful AI assistant named SmolLM...", Qwen2.5's) is not added by the
 * renderer; cllm_chat_default_system finds it in ChatML templates so that the
 * caller can pass it. Llama 3.1's date header is not reproduced. zephyr
 * always ends turns with "</s>" (the EOS of zephyr-7b and TinyLlama; a model
 * of this family with another EOS needs a style of its own). Trimming strips
 * ASCII whitespace only. Tool calls and multi-part contents are not
 * supported.
 *
 * The text carries special-token text ("<|im_start|>", ...) that the
 * tokenizer must map to the special tokens. Message contents are copied
 * verbatim: a user who types "<|im_end|>" gets that text in the prompt, and
 * keeping it from becoming a special token is the tokenizer's business.
 */
#ifndef CLLM_RUNTIME_CHAT_H
#define CLLM_RUNTIME_CHAT_H

#include "core/common.h"

typedef enum cllm_chat_style {
    CLLM_CHAT_STYLE_CHATML = 0,
    CLLM_CHAT_STYLE_LLAMA2,
    CLLM_CHAT_STYLE_LLAMA3,
    CLLM_CHAT_STYLE_GEMMA,
    CLLM_CHAT_STYLE_ZEPHYR,
    CLLM_CHAT_STYLE_COUNT
} cllm_chat_style;

/* One message; both strings NUL-terminated and owned by the caller. */
typedef struct cllm_chat_msg {
    const char *role;    /* "system", "user" or "assistant" */
    const char *content; /* UTF-8 */
} cllm_chat_msg;

/*
 * Recognises the family of a Jinja chat template (the GGUF metadata value
 * tokenizer.chat_template) and writes it to `*out`. The markers, tried in
 * this order: "<|start_header_id|>" -> llama3; "<|im_start|>" -> chatml;
 * "<start_of_turn>" -> gemma; "[INST]" with "<<SYS>>" -> llama2; "<|user|>"
 * with "<|assistant|>" and "</s>" or eos_token, without Phi-3's "<|end|>"
 * -> zephyr.
 *
 * Returns CLLM_OK; CLLM_ERR_INVALID_ARG if `template_src` is NULL or empty
 * (the model has no template: choose a style by name); CLLM_ERR_UNSUPPORTED
 * if the template is of no known family (the message quotes its start and
 * lists the styles). On failure `*out` is untouched. Thread-safe.
 */
cllm_status cllm_chat_style_detect(const char *template_src, cllm_chat_style *out);

/*
 * The style's name: "chatml", "llama2", "llama3", "gemma" or "zephyr"
 * ("unknown" for a value out of range). A constant string; thread-safe.
 */
const char *cllm_chat_style_name(cllm_chat_style style);

/*
 * Parses a style name (for a command-line override), ASCII case-insensitive.
 * Accepts the names above and the aliases "llama-2", "llama-3", "gemma2",
 * "gemma3". Returns CLLM_OK, or CLLM_ERR_UNSUPPORTED (with the list of
 * names; `*out` untouched) for anything else, NULL included. Thread-safe.
 */
cllm_status cllm_chat_style_from_name(const char *name, cllm_chat_style *out);

/*
 * True if text rendered in this style begins with the BOS token's text
 * ("<s>", "<|begin_of_text|>", "<bos>": llama2, llama3, gemma). Then the
 * caller must tokenize without adding BOS, or the prompt starts with two.
 * When false, the text has no BOS and the caller adds one if the
 * tokenizer's add_bos setting says so. Thread-safe.
 */
bool cllm_chat_style_has_bos_text(cllm_chat_style style);

/*
 * The text that ends a turn in this style ("<|im_end|>", "<|eot_id|>",
 * "<end_of_turn>", "</s>"): generation of an assistant turn stops there
 * (besides the model's EOS). A constant string ("" when out of range).
 * Thread-safe.
 */
const char *cllm_chat_style_eot(cllm_chat_style style);

/*
 * Finds the default system prompt of a ChatML template: the text of a string
 * literal "<|im_start|>system\n{TEXT}<|im_end|>" that the template emits
 * when the conversation has no system message (SmolLM2, Qwen2.5). Jinja
 * escapes in TEXT (\n, \t, \', \", \\) are decoded; TEXT is at most
 * 4 KiB. Linear in the template's length (templates come from files).
 *
 * Returns CLLM_OK with `*out` a new NUL-terminated string that the caller
 * releases with cllm_free(), or with `*out` = NULL when the template has none
 * (any other family, or NULL / empty `template_src`); CLLM_ERR_NOMEM (with
 * `*out` untouched). Thread-safe.
 */
cllm_status cllm_chat_default_system(const char *template_src, char **out);

/*
 * Renders `msgs[0, n)` in `style` into `buf` (NUL-terminated) and, if
 * `add_assistant_prompt`, appends the opening of an assistant turn (llama2
 * has none; its user turns already end with the cue). `*needed` receives the
 * buffer size the text requires, its terminating NUL included (strlen + 1).
 *
 * With `buf` NULL (and `buf_size` 0) this is a size query: it returns
 * CLLM_OK with `*needed` set and logs nothing.
 *
 * Rules: n >= 1; every role is "system", "user" or "assistant" and every
 * content non-NULL. llama2 and gemma further need an optional system message
 * first, then user and assistant turns alternating, starting with a user
 * turn (their templates refuse anything else).
 *
 * Returns CLLM_OK; CLLM_ERR_TOO_LARGE if `buf` is not NULL and `buf_size` <
 * `*needed` (`*needed` is set, nothing is written to `buf`);
 * CLLM_ERR_INVALID_ARG for a broken rule or a style out of range (`*needed`
 * and `buf` untouched). Thread-safe.
 */
cllm_status cllm_chat_render(cllm_chat_style style, const cllm_chat_msg *msgs, size_t n,
                             bool add_assistant_prompt, char *buf, size_t buf_size, size_t *needed);

/*
 * As cllm_chat_render, into a new NUL-terminated string `*out` of length
 * `*out_len` (`out_len` may be NULL). The caller releases it with cllm_free().
 * Returns CLLM_OK, the errors of cllm_chat_render, or CLLM_ERR_NOMEM; on
 * failure the outputs are untouched. Thread-safe.
 */
cllm_status cllm_chat_render_alloc(cllm_chat_style style, const cllm_chat_msg *msgs, size_t n,
                                   bool add_assistant_prompt, char **out, size_t *out_len);

#endif /* CLLM_RUNTIME_CHAT_H */
