/*
 * Tokenizers built from GGUF metadata: SentencePiece-style ("llama") and
 * byte-level BPE ("gpt2").
 *
 *     cllm_tokenizer *tok;
 *     if (cllm_tokenizer_new_from_gguf(g, &tok) != CLLM_OK) { ... cllm_last_error() ... }
 *
 *     int32_t ids[512];
 *     size_t n;
 *     st = cllm_tokenizer_encode(tok, text, strlen(text), true, false, ids, 512, &n);
 *     if (st == CLLM_ERR_TOO_LARGE) { ... n is the number of ids needed ... }
 *
 *     cllm_detokenizer *d;
 *     cllm_detokenizer_new_tok(tok, 0, &d);
 *     for each generated id:
 *         const char *s; size_t len;
 *         cllm_detokenizer_put(d, id, &s, &len);   // complete UTF-8 only
 *         fwrite(s, 1, len, stdout);
 *     cllm_detokenizer_flush(d, &s, &len);
 *     cllm_detokenizer_free(d);
 *     cllm_tokenizer_free(tok);
 *
 * GGUF keys read (all under "tokenizer.ggml."): model ("llama" or "gpt2";
 * anything else is CLLM_ERR_UNSUPPORTED), tokens (required), scores and
 * token_type (optional; default 0.0 and normal), merges (required for gpt2),
 * pre (gpt2 only; see below), bos/eos/eot/eom/unknown/padding_token_id,
 * add_bos_token, add_eos_token, add_space_prefix (llama only; ignored for
 * gpt2). An id of 0xFFFFFFFF (or any negative value) means "none"; without
 * eot_token_id, the end-of-turn token is found by its text (<|eot_id|>,
 * <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>, ...). A malformed value
 * (array lengths that differ, ids out of range, add_bos_token/add_eos_token
 * set without a BOS/EOS token, strings that are not valid UTF-8 or hold NUL
 * bytes, token types outside 0..6, NaN scores, malformed merges, a token over
 * CLLM_TOKENIZER_MAX_TOKEN_BYTES) is CLLM_ERR_FORMAT with a message naming
 * the file and the key. An out-of-range padding id only logs a warning (the
 * tokenizer does not use it) and is dropped.
 *
 * Defaults when the keys are absent: "llama" adds BOS (id 1 if no bos key),
 * no EOS, and a space prefix, with unknown id 0 and EOS id 2 when the vocab
 * is large enough; "gpt2" adds neither BOS nor EOS.
 *
 * Pre-tokenizers for "gpt2" (tokenizer.ggml.pre), all hand-written matchers
 * over code points with the \p{L}, \p{N} and \s classes of unicode.h:
 *   - absent, "default", "gpt-2": the GPT-2 pattern
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     (an absent key logs a warning; note that llama.cpp's "default" is a
 *     different, older pattern, and GPT-2's is what such files expect)
 *   - "llama3", "llama-bpe", "llama-v3": the Llama 3 pattern
 *       (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *       ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *     and, as Llama 3 does, a pre-token that is a whole vocab token is emitted
 *     as is without running the merges;
 *   - "qwen2", "deepseek-r1-qwen": Qwen2's pattern, Llama 3's with \p{N}
 *     for \p{N}{1,3} (every digit a pre-token); the merges always run;
 *   - "smollm": SmolLM / SmolLM2's Hugging Face pre-tokenizer, a Sequence of
 *     Digits(individual_digits = true) and ByteLevel(add_prefix_space = false,
 *     use_regex = true): every \p{N} code point is a pre-token of its own and
 *     the text between them is split by the GPT-2 pattern (with the piece's
 *     end acting as the end of text for the (?!\S) look-ahead). This is
 *     SmolLM2's tokenizer.json as recalled (not checked against a file
 *     here); llama.cpp treats "smollm" the same way (\p{N}, then the GPT-2
 *     pattern), as do StarCoder-style vocabularies.
 * Any other name is CLLM_ERR_UNSUPPORTED (a wrong pre-tokenizer silently
 * gives different ids, so it is refused rather than guessed).
 *
 * As llama.cpp does: a user-defined token whose text ends a turn (e.g.
 * Phi-3's "</s>") is a control token, matched only with parse_special; in a
 * file whose general.name contains "phi-3" or "phi3", the special tokens
 * other than <unk>, <s> and <|endoftext|> eat the ASCII whitespace after
 * them ("<|user|>\n" is one token).
 *
 * Thread safety: a built tokenizer is immutable; any number of threads may
 * call the const functions on it at once. A detokenizer is one stream's state
 * and must not be used by two threads at once.
 */
#ifndef CLLM_TEXT_TOKENIZER_H
#define CLLM_TEXT_TOKENIZER_H

#include "core/common.h"
#include "gguf/gguf.h"

/* Limits for untrusted input. */
#define CLLM_TOKENIZER_MAX_TEXT        ((size_t)1 << 26) /* bytes per encode call (64 MiB) */
#define CLLM_TOKENIZER_MAX_TOKEN_BYTES 65536             /* bytes in one token's text */

typedef struct cllm_tokenizer cllm_tokenizer;

typedef enum cllm_tokenizer_kind {
    CLLM_TOKENIZER_SPM = 0, /* tokenizer.ggml.model "llama" */
    CLLM_TOKENIZER_BPE,     /* tokenizer.ggml.model "gpt2" */
    CLLM_TOKENIZER_KIND_COUNT
} cllm_tokenizer_kind;

/* tokenizer.ggml.token_type values (on-disk values). */
typedef enum cllm_token_type {
    CLLM_TOKEN_TYPE_UNDEFINED = 0, /* treated as normal */
    CLLM_TOKEN_TYPE_NORMAL = 1,
    CLLM_TOKEN_TYPE_UNKNOWN = 2,
    CLLM_TOKEN_TYPE_CONTROL = 3,      /* <s>, <|im_start|>, ...: never produced from plain text */
    CLLM_TOKEN_TYPE_USER_DEFINED = 4, /* added tokens, matched whole in the input */
    CLLM_TOKEN_TYPE_UNUSED = 5,
    CLLM_TOKEN_TYPE_BYTE = 6, /* SPM byte fallback: <0xXX> */
    CLLM_TOKEN_TYPE_COUNT
} cllm_token_type;

/* Pre-tokenizers of byte-level BPE (see the top of this file). */
typedef enum cllm_pretok {
    CLLM_PRETOK_NONE = 0, /* SPM: no pre-tokenizer */
    CLLM_PRETOK_GPT2,
    CLLM_PRETOK_LLAMA3,
    CLLM_PRETOK_SMOLLM,
    CLLM_PRETOK_QWEN2,
    CLLM_PRETOK_COUNT
} cllm_pretok;

/*
 * Builds a tokenizer from the tokenizer.ggml.* metadata of `g`. Everything it
 * needs is copied: `g` may be freed afterwards. On success *out owns a new
 * tokenizer (free it with cllm_tokenizer_free). On failure *out is untouched
 * and the status is CLLM_ERR_FORMAT (malformed metadata), CLLM_ERR_UNSUPPORTED
 * (an unknown model or pre-tokenizer) or CLLM_ERR_NOMEM. Accepted with a
 * warning (docs/cli.md, "Input validation"): tokens that repeat an earlier
 * token's text (encoding gives the last id with that text, each id decodes to
 * its own), negative special token ids (none), an out-of-range padding id.
 */
cllm_status cllm_tokenizer_new_from_gguf(const cllm_gguf *g, cllm_tokenizer **out);

/* Frees a tokenizer; NULL does nothing. */
void cllm_tokenizer_free(cllm_tokenizer *tok);

/*
 * Tokenizes text[0..len) (any bytes; NUL is an ordinary byte; text may be NULL
 * when len is 0).
 *
 *  - add_special: add BOS and/or EOS as the file's add_bos_token /
 *    add_eos_token say.
 *  - parse_special: control tokens (type 3, e.g. "<|im_start|>", "<s>") and
 *    the unknown token written literally in the text are recognised as those
 *    single tokens. User-defined tokens (type 4) are always recognised, with
 *    or without parse_special, as Hugging Face's added tokens are. Matching is
 *    leftmost-longest.
 *  - SPM: each stretch of plain text (the whole text, or each stretch after a
 *    special token) gets the space prefix if the file asks for one; spaces
 *    become U+2581; the highest-scoring adjacent pair that forms a vocab token
 *    is merged until none is left; characters not in the vocab become their
 *    <0xXX> byte tokens, or the unknown token when the vocab lacks those.
 *  - BPE: the pre-tokenizer splits the text; each piece's bytes are mapped to
 *    GPT-2's printable code points and merged by merge rank.
 *  - Invalid UTF-8 is never an error: each undecodable byte is a character of
 *    its own (SPM: byte fallback; BPE: its byte-level code point).
 *
 * The ids are written to ids[0..max_ids) and their number to *n_ids. With
 * ids NULL it only counts: *n_ids gets the number of ids and the result is
 * CLLM_OK (max_ids is ignored). Returns CLLM_OK; CLLM_ERR_TOO_LARGE when
 * more than max_ids ids are needed, and then *n_ids is the number needed and
 * ids[0..max_ids) holds the first ones; CLLM_ERR_TOO_LARGE also when len
 * exceeds CLLM_TOKENIZER_MAX_TEXT (then *n_ids is untouched);
 * CLLM_ERR_UNSUPPORTED when a character maps to no token at all (a vocab
 * without byte tokens and without an unknown token); CLLM_ERR_NOMEM.
 * Working memory is allocated per call, in proportion to len.
 */
cllm_status cllm_tokenizer_encode(const cllm_tokenizer *tok, const char *text, size_t len,
                                  bool add_special, bool parse_special, int32_t *ids,
                                  size_t max_ids, size_t *n_ids);

/* Flags of cllm_tokenizer_decode and cllm_detokenizer_new: CLLM_DETOK_*
 * (public, cllm.h). */

/*
 * The bytes of one token as text: SPM's U+2581 becomes a space and <0xXX>
 * byte tokens become the byte; byte-level BPE's code points become their
 * bytes again (user-defined BPE tokens are stored as plain text and returned
 * as is). Control tokens give their text when `special` is true, else "";
 * the unknown token gives its text when `special`, else U+FFFD.
 *
 * Returns a pointer into the tokenizer (valid until it is freed; not
 * NUL-terminated in general, since pieces may hold NUL bytes) and the length
 * in *len, or NULL for an id outside 0..n_vocab-1.
 */
const char *cllm_tokenizer_token_to_piece(const cllm_tokenizer *tok, int32_t id, bool special,
                                          size_t *len);

/*
 * Decodes ids[0..n_ids) into buf[0..cap): the concatenated pieces, as raw
 * bytes (not validated as UTF-8; use a cllm_detokenizer for display).
 * `flags` is a set of CLLM_DETOK_*. The length goes to *len. Returns CLLM_OK;
 * CLLM_ERR_TOO_LARGE when cap is too small (then *len is the length needed,
 * buf holds as much as fits); CLLM_ERR_INVALID_ARG for an id out of range
 * (nothing written). With buf NULL it only measures: *len gets the length and
 * the result is CLLM_OK.
 */
cllm_status cllm_tokenizer_decode(const cllm_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                  int flags, char *buf, size_t cap, size_t *len);

/* ---- vocabulary ---- */

int32_t cllm_tokenizer_n_vocab(const cllm_tokenizer *tok);
cllm_tokenizer_kind cllm_tokenizer_kind_of(const cllm_tokenizer *tok);
cllm_pretok cllm_tokenizer_pretok(const cllm_tokenizer *tok);

/* Special ids, -1 when the file has none. */
int32_t cllm_tokenizer_bos(const cllm_tokenizer *tok);
int32_t cllm_tokenizer_eos(const cllm_tokenizer *tok);
int32_t cllm_tokenizer_eot(const cllm_tokenizer *tok); /* end of turn; may be auto-detected */
int32_t cllm_tokenizer_unk(const cllm_tokenizer *tok);
int32_t cllm_tokenizer_pad(const cllm_tokenizer *tok);

/* What encode(add_special = true) adds. */
bool cllm_tokenizer_add_bos(const cllm_tokenizer *tok);
bool cllm_tokenizer_add_eos(const cllm_tokenizer *tok);

/*
 * Whether `id` ends generation: EOS, EOT, EOM, and control (or user-defined)
 * tokens whose text marks the end of a turn when the vocab has them:
 * <|eot_id|>, <|eom_id|>, <|im_end|>, <|end|>, <end_of_turn>, <|endoftext|>,
 * <|end_of_text|>, <EOT>, <|return|>, <|call|>. False for ids out of range.
 */
bool cllm_tokenizer_is_eog(const cllm_tokenizer *tok, int32_t id);

/* The token's type; CLLM_TOKEN_TYPE_COUNT for ids out of range. */
cllm_token_type cllm_tokenizer_token_type(const cllm_tokenizer *tok, int32_t id);

/*
 * The token's text as stored in the file (e.g. "▁Hello", "Ġworld", "<s>"),
 * NUL-terminated, its length in *len if len is not NULL; NULL for ids out of
 * range. Valid until the tokenizer is freed.
 */
const char *cllm_tokenizer_token_text(const cllm_tokenizer *tok, int32_t id, size_t *len);

/* The id of the token whose stored text is text[0..len), or -1. When a text
 * occurs twice in a vocab, the later id wins. */
int32_t cllm_tokenizer_find(const cllm_tokenizer *tok, const char *text, size_t len);

/* ---- streaming detokenizer ----
 *
 * The detokenizer is public (cllm.h: cllm_detokenizer_new on a model, put,
 * flush, reset, free); the library makes one on a tokenizer. */

/*
 * A detokenizer for one output stream of `tok` (which must outlive it);
 * `flags` is a set of CLLM_DETOK_*. It only ever emits complete, valid UTF-8:
 * bytes that begin a character are held back until a later token completes
 * them; ill-formed bytes become U+FFFD. CLLM_OK, or CLLM_ERR_NOMEM (*out then
 * untouched).
 */
cllm_status cllm_detokenizer_new_tok(const cllm_tokenizer *tok, int flags, cllm_detokenizer **out);

#endif /* CLLM_TEXT_TOKENIZER_H */
