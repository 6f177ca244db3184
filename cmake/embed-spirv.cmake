# Writes the SPIR-V file SPV as a C array NAME_spv (uint32_t words, the
# module's shaders) into the header OUT. Run with cmake -P.
file(READ ${SPV} hex HEX)
string(LENGTH "${hex}" len)
math(EXPR rem "${len} % 8")
if(NOT rem EQUAL 0)
  message(FATAL_ERROR "${SPV}: not a whole number of 32-bit words")
endif()
# little-endian words: bytes b0 b1 b2 b3 -> 0xb3b2b1b0
string(REGEX REPLACE "([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])([0-9a-f][0-9a-f])"
       "0x\\4\\3\\2\\1u," words "${hex}")
file(WRITE ${OUT} "/* generated from ${NAME}.comp by glslc; do not edit */\n"
     "static const uint32_t ${NAME}_spv[] = {${words}};\n")
