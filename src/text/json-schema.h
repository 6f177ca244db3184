/*
 * JSON Schema to GBNF (text/grammar.h): the public functions
 * cllm_json_schema_to_grammar and cllm_json_grammar (cllm.h), and what
 * they are made of. docs/grammar.md lists the keywords supported.
 */
#ifndef CLLM_TEXT_JSON_SCHEMA_H
#define CLLM_TEXT_JSON_SCHEMA_H

#include "core/common.h"

#endif /* CLLM_TEXT_JSON_SCHEMA_H */
