/*
 * Tokenizer internals shared by tokenizer.c (loading, special tokens,
 * decoding), tokenizer-spm.c, tokenizer-bpe.c and pretok.c. Not part of the
 * API; tests may include it to reach the pre-tokenizers.
 */
#ifndef CLLM_TEXT_TOKENIZER_IMPL_H
#define CLLM_TEXT_TOKENIZER_IMPL_H

#include "text/tokenizer.h"

/* Per-token flags. */
enum {
    CLLM_TOKF_EOG = 1,       /* ends generation */
    CLLM_TOKF_MATCHABLE = 2, /* may be produced from plain text (normal, user-defined) */
    CLLM_TOKF_RSTRIP = 4,    /* a special token that eats the whitespace after it (Phi-3) */
};

typedef struct cllm_token_data {
    size_t text_off;    /* into text_pool; NUL-terminated */
    size_t piece_off;   /* into piece_pool; the bytes the token stands for */
    uint32_t text_len;  /* bytes */
    uint32_t piece_len; /* bytes */
    float score;        /* SPM merge priority (higher first) */
    uint8_t type;       /* cllm_token_type */
    uint8_t flags;      /* CLLM_TOKF_* */
} cllm_token_data;

/* A byte trie over the texts of special tokens (leftmost-longest matching). */
typedef struct cllm_trie_node {
    int32_t child;   /* first child, or -1 */
    int32_t sibling; /* next sibling, or -1 */
    int32_t id;      /* token ending here, or -1 */
    uint8_t byte;    /* the byte on the edge into this node */
} cllm_trie_node;

struct cllm_tokenizer {
    cllm_tokenizer_kind kind;
    cllm_pretok pretok;
    int32_t n_vocab;
    cllm_token_data *tokens; /* [n_vocab] */
    char *text_pool;
    char *piece_pool;
    size_t max_piece_len; /* longest piece, for the detokenizer's buffer */

    /* text -> id: open addressing over ids, -1 = empty; capacity map_mask + 1. */
    int32_t *map;
    size_t map_mask;

    /* BPE merges "left right", rank = index; map over ranks like `map`. */
    int64_t n_merges;
    char *merge_pool;
    size_t *merge_off;    /* [n_merges] */
    uint32_t *merge_len;  /* [n_merges] whole "left right" */
    uint32_t *merge_left; /* [n_merges] bytes of "left" */
    int32_t *merge_map;
    size_t merge_mask;

    /* BPE byte-level mapping (GPT-2's bytes_to_unicode). */
    uint16_t byte_to_cp[256];
    int16_t cp_to_byte[512]; /* -1 where the code point is no byte's image */

    /* SPM byte fallback: the <0xXX> token of each byte, or -1. */
    int32_t byte_token[256];
    /* SPM: no matchable token has U+2581 after another character, so merges
     * never cross a word start (tokenizer-spm.c). */
    bool spm_split_words;

    /* Special tokens: trie; root_child[b] is the node for first byte b or -1. */
    cllm_trie_node *trie;
    int32_t n_trie;
    int32_t n_user_defined; /* user-defined tokens in the trie (matched always) */
    int32_t root_child[256];

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos, add_eos, add_space_prefix;
    bool ignore_merges; /* Llama 3: a pre-token that is a token skips merging */
};

/* ---- shared helpers ---- */

/* The id whose text is s[0..n), or -1. */
int32_t cllm_tok_lookup(const cllm_tokenizer *tok, const char *s, size_t n);

/* Like cllm_tok_lookup, but only tokens that plain text may produce. */
static inline int32_t cllm_tok_lookup_text(const cllm_tokenizer *tok, const char *s, size_t n) {
    int32_t id = cllm_tok_lookup(tok, s, n);
    return id >= 0 && (tok->tokens[id].flags & CLLM_TOKF_MATCHABLE) ? id : -1;
}

/* The rank of the merge "left right", or -1. */
int32_t cllm_tok_merge_rank(const cllm_tokenizer *tok, const char *left, size_t left_len,
                            const char *right, size_t right_len);

/* FNV-1a, 64 bits; start with CLLM_TOK_HASH_INIT. */
#define CLLM_TOK_HASH_INIT 0xcbf29ce484222325ull
static inline uint64_t cllm_tok_hash(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/* Output of encode: ids are counted past max so that the caller learns how
 * many are needed. */
typedef struct cllm_tok_out {
    int32_t *ids;
    size_t max;
    size_t n;
} cllm_tok_out;

static inline void cllm_tok_out_push(cllm_tok_out *o, int32_t id) {
    if (o->n < o->max) o->ids[o->n] = id;
    o->n++;
}

/* One symbol of a merge: a byte range of the working text, in a linked list. */
typedef struct cllm_tok_sym {
    int32_t prev, next; /* -1 at the ends */
    uint32_t off, len;  /* len 0: merged away */
} cllm_tok_sym;

/* A candidate merge of symbols left and right; the smallest key goes first,
 * then the leftmost. SPM: key = -score; BPE: key = rank. */
typedef struct cllm_tok_bigram {
    double key;
    int32_t left, right;
    uint32_t len; /* bytes of the merged text, to spot stale entries */
} cllm_tok_bigram;

/* Working memory of one encode call (grown on demand, freed at the end). */
typedef struct cllm_tok_scratch {
    char *text;
    size_t text_cap;
    cllm_tok_sym *syms;
    size_t syms_cap;
    cllm_tok_bigram *heap;
    size_t heap_cap, heap_n;
} cllm_tok_scratch;

void cllm_tok_scratch_free(cllm_tok_scratch *s);
/* Ensure capacity; false on out of memory (the message is not logged). */
bool cllm_tok_scratch_text(cllm_tok_scratch *s, size_t n);
bool cllm_tok_scratch_syms(cllm_tok_scratch *s, size_t n);
/* Pushes onto the bigram heap; false on out of memory. */
bool cllm_tok_heap_push(cllm_tok_scratch *s, cllm_tok_bigram b);
/* Pops the first bigram into *b; false when empty. */
bool cllm_tok_heap_pop(cllm_tok_scratch *s, cllm_tok_bigram *b);

/* Pushes the bigram (left, right) if the tokenizer can merge it (left or
 * right < 0: nothing); false on out of memory. */
typedef bool (*cllm_tok_try_pair_fn)(const cllm_tokenizer *tok, cllm_tok_scratch *s, int32_t left,
                                     int32_t right);

/* Merges the n linked symbols of s (one word or stretch) by repeatedly
 * taking the best bigram from the heap, as `try_pair` ranks them, until
 * none is left; stale bigrams (a side merged away or grown) are skipped.
 * The surviving symbols stay linked from s->syms[0]. False on out of memory. */
bool cllm_tok_merge(const cllm_tokenizer *tok, cllm_tok_scratch *s, int32_t n,
                    cllm_tok_try_pair_fn try_pair);

/* Emits the tokens of an SPM text stretch (before whitespace escaping);
 * `prefix` adds the space prefix. */
cllm_status cllm_tok_spm_encode(const cllm_tokenizer *tok, const char *text, size_t len,
                                bool prefix, cllm_tok_scratch *s, cllm_tok_out *out);

/* Emits the tokens of a BPE text stretch (pre-tokenized here). */
cllm_status cllm_tok_bpe_encode(const cllm_tokenizer *tok, const char *text, size_t len,
                                cllm_tok_scratch *s, cllm_tok_out *out);

/* Fills the GPT-2 byte <-> code point tables of tok. */
void cllm_tok_bpe_init_bytes(cllm_tokenizer *tok);

/* ---- pre-tokenizers (pretok.c) ---- */

/* Receives one pre-token text[start..end); a status other than CLLM_OK stops
 * the split and is returned by cllm_pretok_split. */
typedef cllm_status (*cllm_pretok_fn)(void *user_data, size_t start, size_t end);

/* Splits text[0..len) by the pre-tokenizer `kind` (not CLLM_PRETOK_NONE) into
 * consecutive non-empty pieces that cover it. */
cllm_status cllm_pretok_split(cllm_pretok kind, const char *text, size_t len, cllm_pretok_fn fn,
                              void *user_data);

#endif /* CLLM_TEXT_TOKENIZER_IMPL_H */
