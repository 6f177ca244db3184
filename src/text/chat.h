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
 * A file's own template is rendered by the Jinja interpreter (jinja.h,
 * cllm_chat_render_template). The styles below are the fallback for files
 * without one, for a style named by the caller, and for a template that
 * fails: a template's family is recognised by distinctive substrings and
 * that family's format is rendered in C, reproducing what the reference
 * template renders (Hugging Face apply_chat_template with
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
 *   phi3  (Phi-3, Phi-3.5 instruct)  no BOS in the text (the tokenizer adds it)
 *       <|system|>\n{S}<|end|>\n<|user|>\n{U}<|end|>\n<|assistant|>\n{A}<|end|>\n ...
 *       prompt: <|assistant|>\n   (an empty system message is left out)
 *
 * Known differences from the reference templates: a default system prompt
 * that a template inserts when the conversation has none (SmolLM2's "You are
 * a helpful AI assistant named SmolLM...", Qwen2.5's) is not added by the
 * renderer; cllm_chat_default_system finds it in ChatML templates so that the
 * caller can pass it. Llama 3.1's date header is not reproduced. zephyr
 * always ends turns with "</s>" (the EOS of zephyr-7b and TinyLlama; a model
 * of this family with another EOS needs a style of its own). Trimming strips
 * ASCII whitespace only. phi3 keeps a system message, which Phi-3's first
 * template (mini-4k) drops; without the generation prompt Phi-3.5 ends with
 * its EOS text, which phi3 leaves out. Tool calls and multi-part contents are not
 * supported.
 *
 * The text carries special-token text ("<|im_start|>", ...) that the
 * tokenizer must map to the special tokens. Message contents are copied
 * verbatim: a user who types "<|im_end|>" gets that text in the prompt, and
 * keeping it from becoming a special token is the tokenizer's business.
 */
#ifndef CLLM_TEXT_CHAT_H
#define CLLM_TEXT_CHAT_H

#include "core/common.h"

/* The chat API is public (cllm.h); the renderers are chat.c. */

/*
 * Renders msgs[0, n) with the file's own template (Jinja source) through
 * the interpreter of jinja.h: the context holds `messages` (role and
 * content of each), `add_generation_prompt`, `bos_token` and `eos_token`
 * (the texts of those tokens, "" when NULL). Into a new string *out
 * (cllm_free) of length *out_len (may be NULL). CLLM_ERR_FORMAT when the
 * template fails (a syntax error, raise_exception, ...), CLLM_ERR_TOO_LARGE,
 * CLLM_ERR_NOMEM, CLLM_ERR_INVALID_ARG for a message without role or
 * content; outputs untouched on failure. Thread-safe.
 */
cllm_status cllm_chat_render_template(const char *template_src, const cllm_chat_msg *msgs, size_t n,
                                      bool add_generation_prompt, const char *bos_token,
                                      const char *eos_token, char **out, size_t *out_len);

#endif /* CLLM_TEXT_CHAT_H */
