/*
 * A small JSON reader for test data (trusted files written by the project's
 * scripts): parse into a tree, look values up, free the tree.
 *
 *     json *doc = json_parse(text);          // NULL on a syntax error
 *     const json *ids = json_get(json_get(doc, "cases"), "smollm2");
 *     for (size_t i = 0; i < json_len(ids); i++) json_num(json_at(ids, i));
 *     json_free(doc);
 */
#ifndef CLLM_TESTS_JSON_H
#define CLLM_TESTS_JSON_H

#include <stdbool.h>
#include <stddef.h>

typedef enum json_kind { JSON_NULL, JSON_BOOL, JSON_NUM, JSON_STR, JSON_ARR, JSON_OBJ } json_kind;

typedef struct json {
    json_kind kind;
    double num;         /* JSON_NUM, JSON_BOOL (0/1) */
    char *str;          /* JSON_STR (UTF-8, NUL-terminated) */
    size_t len;         /* JSON_STR bytes; JSON_ARR / JSON_OBJ elements */
    struct json *items; /* JSON_ARR / JSON_OBJ values */
    char **keys;        /* JSON_OBJ keys */
} json;

/* The tree of `text`; NULL on a syntax error or out of memory. */
json *json_parse(const char *text);
/* Frees a tree from json_parse; NULL does nothing. */
void json_free(json *j);
/* The member `key` of an object, or NULL (also for NULL or non-objects). */
const json *json_get(const json *obj, const char *key);
/* Element i of an array or object, or NULL. */
const json *json_at(const json *arr, size_t i);
/* Key of member i of an object, or NULL. */
const char *json_key(const json *obj, size_t i);
size_t json_len(const json *j);      /* 0 for NULL and scalars */
double json_num(const json *j);      /* 0 for NULL and non-numbers */
const char *json_str(const json *j); /* NULL for non-strings */

#endif /* CLLM_TESTS_JSON_H */
