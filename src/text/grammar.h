/*
 * GBNF grammars: the parser, a matcher that follows generated text through
 * a grammar byte by byte, and the token mask of a vocabulary.
 *
 *     cllm_grammar *g;
 *     if (cllm_grammar_parse("root ::= \"yes\" | \"no\"", "root", &g) != CLLM_OK) ...
 *     cllm_grammar_matcher *m;
 *     cllm_grammar_matcher_new(g, &m);
 *     bool ok;
 *     cllm_grammar_matcher_try(m, "ye", 2, &ok);   // ok: "ye" can start a sentence
 *     cllm_grammar_matcher_accept(m, "yes", 3);    // the state moves on
 *     cllm_grammar_matcher_done(m);                // true: "yes" is a sentence
 *     cllm_grammar_matcher_free(m);
 *     cllm_grammar_free(g);
 *
 * The format is llama.cpp's GBNF (docs/grammar.md): rules `name ::= ...`,
 * alternatives `|`, groups `( )`, `* + ?`, `{m}`, `{m,}`, `{m,n}`, string
 * literals and character classes (`[a-z]`, `[^...]`) with the escapes \n
 * \r \t \" \\ \[ \] \- \xHH \uHHHH \UHHHHHHHH, `.` for any character, `#`
 * comments, UTF-8 throughout. A rule's body runs until the next `name ::=`.
 *
 * Compiled form: characters become bytes. A character class is a set of
 * UTF-8 byte sequences, each a row of byte sets (the standard split of a
 * code point range into ranges of equal-length encodings), so the matcher
 * reads bytes, and a token that ends in the middle of a character leaves
 * the matcher in the middle of that character.
 *
 * The matcher is a pushdown automaton with a set of stacks (one per way the
 * text read so far can be parsed, as the Earley-like recogniser llama.cpp
 * uses): each stack holds positions in the rules' alternatives, the top one
 * at a byte set. Reading a byte keeps the stacks whose top set holds it,
 * moves them on, and expands rule references until every top is a byte set
 * again. An empty stack means that the text is a complete sentence.
 * Identical stacks are merged. A rule that reaches itself without reading a
 * byte (left recursion) is refused when parsing; more than
 * CLLM_GRAMMAR_MAX_STACKS stacks or a stack deeper than
 * CLLM_GRAMMAR_MAX_DEPTH is CLLM_ERR_TOO_LARGE.
 *
 * Thread safety: a compiled grammar and a vocabulary are immutable and may
 * be shared; a matcher is one stream's state.
 */
#ifndef CLLM_TEXT_GRAMMAR_H
#define CLLM_TEXT_GRAMMAR_H

#include "core/common.h"
#include "text/tokenizer.h"

/* Limits for untrusted grammars. */
#define CLLM_GRAMMAR_MAX_TEXT   ((size_t)1 << 22) /* bytes of GBNF text (4 MiB) */
#define CLLM_GRAMMAR_MAX_ELEMS  ((size_t)1 << 22) /* compiled elements */
#define CLLM_GRAMMAR_MAX_REPEAT 10000             /* m and n of {m,n} */
#define CLLM_GRAMMAR_MAX_STACKS 8192              /* parse stacks at one point of the text */
#define CLLM_GRAMMAR_MAX_DEPTH  4096              /* positions on one stack */
#define CLLM_GRAMMAR_MAX_NEST   1024              /* rules entered before reading a byte */

typedef struct cllm_grammar cllm_grammar;
typedef struct cllm_grammar_matcher cllm_grammar_matcher;
typedef struct cllm_grammar_vocab cllm_grammar_vocab;

/*
 * Parses and compiles the NUL-terminated GBNF `text` with `root` (NULL:
 * "root") as its start rule. CLLM_ERR_FORMAT for a syntax error (the
 * message gives line:column and what was expected), an undefined rule (its
 * name and where it is used), a missing root rule or a left-recursive
 * rule; CLLM_ERR_TOO_LARGE past the limits above; CLLM_ERR_NOMEM. On
 * failure *out is untouched.
 */
cllm_status cllm_grammar_parse(const char *text, const char *root, cllm_grammar **out);

/* NULL does nothing. */
void cllm_grammar_free(cllm_grammar *g);

/* A matcher at the start of `g` (which must outlive it). CLLM_OK,
 * CLLM_ERR_TOO_LARGE (the start needs too many stacks) or CLLM_ERR_NOMEM;
 * *out untouched on failure. */
cllm_status cllm_grammar_matcher_new(const cllm_grammar *g, cllm_grammar_matcher **out);

/* NULL does nothing. */
void cllm_grammar_matcher_free(cllm_grammar_matcher *m);

/* Back to the start of the grammar. */
void cllm_grammar_matcher_reset(cllm_grammar_matcher *m);

/* Whether bytes[0, len) can follow the text read so far (*ok). The state
 * does not change. CLLM_OK; CLLM_ERR_TOO_LARGE or CLLM_ERR_NOMEM (the
 * limits above, scratch memory). */
cllm_status cllm_grammar_matcher_try(cllm_grammar_matcher *m, const void *bytes, size_t len,
                                     bool *ok);

/* Reads bytes[0, len): CLLM_OK, or CLLM_ERR_INVALID_ARG if they cannot
 * follow (the state then does not change), CLLM_ERR_TOO_LARGE,
 * CLLM_ERR_NOMEM (nor then). */
cllm_status cllm_grammar_matcher_accept(cllm_grammar_matcher *m, const void *bytes, size_t len);

/* Whether the text read so far is a complete sentence of the grammar. */
bool cllm_grammar_matcher_done(const cllm_grammar_matcher *m);

/* Whether some byte can follow the text read so far. */
bool cllm_grammar_matcher_can_continue(const cllm_grammar_matcher *m);

/*
 * The bytes of each token of `tok` (cllm_tokenizer_token_to_piece without
 * special text) and a trie over them. The token ids stay valid as long as
 * `tok`; the vocabulary owns its copy of the bytes. Tokens whose piece is
 * empty (control tokens) are in no trie path: the grammar never allows
 * them. CLLM_OK or CLLM_ERR_NOMEM; *out untouched on failure.
 */
cllm_status cllm_grammar_vocab_new(const cllm_tokenizer *tok, cllm_grammar_vocab **out);

/* NULL does nothing. */
void cllm_grammar_vocab_free(cllm_grammar_vocab *v);

/* The bytes of token `id` (in range) and their number in *len. */
const char *cllm_grammar_vocab_piece(const cllm_grammar_vocab *v, int32_t id, size_t *len);

/*
 * Sets bit id of allowed[(n_vocab + 7) / 8] (cleared first) for every
 * token with a non-empty piece that can follow the text read so far, and
 * the count in *n_allowed. One walk of the vocabulary's trie: tokens that
 * share a prefix share its work, and a subtree is left as soon as no stack
 * survives its prefix. Failures as cllm_grammar_matcher_try (allowed is
 * then undefined).
 */
cllm_status cllm_grammar_matcher_mask(cllm_grammar_matcher *m, const cllm_grammar_vocab *v,
                                      uint8_t *allowed, int32_t *n_allowed);

#endif /* CLLM_TEXT_GRAMMAR_H */
