#!/bin/sh
# Fails when a function that include/cllm.h or include/cllm-pipeline.h
# declares has no CASE in tests/test_null.c (the program that calls every
# public function with NULL), or no entry in its table.
# Usage: tests/null-coverage.sh [source dir]
src=${1:-.}
names=$(sed -n 's/^[A-Za-z_][A-Za-z0-9_ *]*[ *]\(cllm_[a-z0-9_]*\)(.*/\1/p' \
    "$src/include/cllm.h" "$src/include/cllm-pipeline.h" | sort -u)
if [ -z "$names" ]; then
    echo "null-coverage: no function found in $src/include" >&2
    exit 1
fi
missing=0
for n in $names; do
    if ! grep -q "^CASE($n)" "$src/tests/test_null.c" ||
        ! grep -q "ENTRY($n)," "$src/tests/test_null.c"; then
        echo "null-coverage: $n is not called with NULL in tests/test_null.c" >&2
        missing=$((missing + 1))
    fi
done
echo "null-coverage: $(echo "$names" | wc -l) public functions, $missing missing"
[ "$missing" -eq 0 ]
