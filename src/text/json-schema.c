/* JSON Schema to GBNF, and the built-in JSON grammar. See json-schema.h. */
#include "text/json-schema.h"
#include "core/hostmem.h"

#include <stdlib.h>
#include <string.h>

/* Whitespace is limited (one space, or a line end and up to 20 blanks of
 * indent, between tokens): a model that keeps emitting blanks would
 * otherwise never have to close anything. */
static const char k_json_grammar[] =
    "root   ::= object\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* "
    ")? \"}\"\n"
    "array  ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char   ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws     ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";

const char *cllm_json_grammar(void) { return k_json_grammar; }
